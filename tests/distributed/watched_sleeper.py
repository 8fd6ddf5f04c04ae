"""A rank that only sleeps, under bootstrap.watch (argv[1]: the status board's path): the
test stops or kills it from outside and reads how its watcher recorded the end."""
import sys
import time

from rill.distributed.bootstrap import watch

watch(sys.argv[1], 0, 1)
time.sleep(60)
