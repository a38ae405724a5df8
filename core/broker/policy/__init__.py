"""What shapes a queue or exchange besides its name: declare-time arguments (their
validation, equivalence and RabbitMQ's texts), policies and operator policies (matching,
precedence, what a policy may set), runtime parameters and global parameters.

Each queue argument is one row of `queue_arguments`; the checks, the policy rules and the
docs' table of arguments are made from the rows.

Not here: the queue that applies the effective settings (`lavin.broker.queues`), the files
policies are kept in (`lavin.storage.metadata.policy_files`), their HTTP endpoints (`lavin.management`).
"""
