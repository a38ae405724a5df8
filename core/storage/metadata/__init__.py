"""What the broker keeps besides messages: the durable exchanges, queues and bindings of a
vhost (`definitions_store`, an append-only log), users and vhosts (`access_files`), and
policies, runtime and global parameters (`policy_files`), as documents an operator may read.
"""
