"""Free TCP ports on 127.0.0.1 for the jobs tests start, chosen below the
kernel's ephemeral range (32768-60999 by default on Linux): a port the kernel
hands out for bind(0) can be taken, between the check and the job's own bind,
by an outgoing connection of a test running in parallel (seen under
`ctest -j2`: "port ... is already in use", then a job-token mismatch when a
rank reached the other job's store). Ports below that range are only ever
taken by explicit binds, and a random pick makes two parallel tests agreeing
on one unlikely."""

import random
import socket

LOW, HIGH = 20000, 32000


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(count: int = 1) -> int:
    """P with P .. P + count - 1 free."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(LOW, HIGH - count)
        if all(port_is_free(port + i) for i in range(count)):
            return port
    raise RuntimeError(f"found no {count} adjacent free TCP ports on 127.0.0.1 in {LOW}-{HIGH}")
