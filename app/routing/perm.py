"""A queue's permission bits, as in RocketMQ's PermName: whether producers may write to the topic's
queues on a broker and consumers read them. Plain integers with no imports, so the client package
reads routes with the same bits without pulling in the registry (SQLAlchemy)."""

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
