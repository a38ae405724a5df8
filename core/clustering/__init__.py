"""The clustering front-end: leader election on etcd and data-dir replication."""
