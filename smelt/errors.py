"""The one exception type for user mistakes: bad models, unsupported ops, wrong inputs."""


class SmeltError(Exception):
    """A problem with the user's model or inputs; the message says what to do."""
