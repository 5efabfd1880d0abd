"""A queue's permission bits, as in RocketMQ's PermName: whether producers may write to the topic's
queues on a broker and consumers read them. Plain integers with no imports: the client reads routes
with them, and the broker's route registry (app/routing) keeps them."""

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE
