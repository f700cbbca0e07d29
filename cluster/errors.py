"""The controller's exceptions: a small hierarchy whose messages say what to do."""


class SparkBotError(Exception):
    """Base of every error spark-bot raises on purpose."""


class ConfigError(SparkBotError):
    """The configuration is invalid; the message names the file, the field and what is allowed."""


class NodeError(SparkBotError):
    """A node could not be reached or driven: names the node, what was seen and what to try."""

    checkpoint = "ssh"
    cause = "the node cannot be reached over SSH"

    def __init__(self, node: str, problem: str, fix: str):
        super().__init__(f"{node}: {problem}. {fix}")
        self.node = node
        self.problem = problem
        self.fix = fix


class HostKeyMismatch(NodeError):
    """The node's SSH host key is not the one in known_hosts."""

    cause = "the node's SSH host key changed, or this is not the node"


class DockerUnavailable(NodeError):
    """The node answers SSH but its Docker engine does not."""

    checkpoint = "docker"
    cause = "the node's Docker engine does not answer"
