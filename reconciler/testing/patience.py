"""How long a test waits for something that should happen: a server to start, an answer to
come, a condition to hold.

A wait on a condition ends as soon as the condition holds, so a generous deadline costs a
passing test nothing; it only bounds a hang. `PATIENCE_S` is sized for a 2-core machine running
two full test suites at once (issue 34: a 20 s server start and 10-20 s read timeouts failed
there), not for the idle machine a test is written on. A test that checks a timeout fires keeps
its own short one.
"""

#: Seconds a test waits for what should happen before it fails.
PATIENCE_S = 120.0
