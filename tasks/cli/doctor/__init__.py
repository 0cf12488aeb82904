"""``recur doctor``: is this deployment set up the way recur needs it?

It asks the running services, with the process's own settings, and prints one
line per check: ``ok``; ``warn`` (it works, but a guarantee is weaker than the
docs promise, or could not be verified); ``FAIL`` (something is lost, exposed
or cannot work), each with what to do. Exit code 2 on any FAIL, else 0. A
check that raises is a FAIL line, never a traceback. What each check asks and
why: docs/security.md; the checks of each service are a module of this package.
"""
