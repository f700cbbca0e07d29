"""The controller's exceptions: one small tree whose messages say what failed and what to do.

Library errors (asyncssh, aiohttp, aiodocker) never leave the drivers: `cluster.nodes.seam`
turns them into the NodeError subclasses below, each naming the node, the problem and a fix.
"""


class SparkBotError(Exception):
    """Base of every error spark-bot raises on purpose."""


class ConfigError(SparkBotError):
    """The configuration is invalid; the message names the file, the field and what is allowed."""


class InterfaceProblem(SparkBotError):
    """A node's network interfaces are not what the config expects (auto-detection or a name)."""


class NodeError(SparkBotError):
    """A node could not be reached or driven: names the node, what was seen and what to try."""

    checkpoint = "ssh"
    cause = "the node cannot be reached or driven"

    def __init__(self, node: str, problem: str, fix: str):
        super().__init__(f"{node}: {problem}. {fix}")
        self.node = node
        self.problem = problem
        self.fix = fix


class NodeUnreachable(NodeError):
    """SSH to the node failed: no route, no sshd, login refused, or the connection broke."""

    cause = "the node cannot be reached over SSH"


class HostKeyMismatch(NodeUnreachable):
    """The node's SSH host key is not the one in known_hosts (or is not recorded at all)."""

    cause = "the node's SSH host key changed, or this is not the node"


class NodeTimedOut(NodeError):
    """A call to the node (a command, a Docker API request) did not finish within its bound."""

    cause = "the node, its sshd or its Docker engine is hung or overloaded"


class FileUnreadable(NodeError):
    """A file on the node does not exist or may not be read (a /sys path of an interface
    that is not there, a log only root reads)."""

    cause = "the file is missing on the node or not readable by the SSH user"


class DockerUnavailable(NodeError):
    """The node's Docker engine does not answer, or the connection to it broke."""

    checkpoint = "docker"
    cause = "the node's Docker engine does not answer"


class DockerRefused(NodeError):
    """The Docker engine answered, with an error (a bad request, a conflict, a failed start)."""

    checkpoint = "docker"
    cause = "the node's Docker engine refused the request"

    def __init__(self, node: str, problem: str, fix: str, *, status: int, message: str):
        super().__init__(node, problem, fix)
        self.status = status
        self.message = message


class ContainerMissing(NodeError):
    """The container asked for does not exist on the node."""

    checkpoint = "containers"
    cause = "the container does not exist on the node"

    def __init__(self, node: str, container: str):
        super().__init__(
            node,
            f"no container {container} on {node}",
            "`status` shows what runs where; `up` launches the cluster",
        )
        self.container = container


class ImageMissing(NodeError):
    """The image asked for is not on the node."""

    checkpoint = "image"
    cause = "the image was never pulled or loaded on that node"

    def __init__(self, node: str, image: str):
        super().__init__(
            node,
            f"image {image} is not on {node}",
            f"`docker pull {image}` on {node}, or copy it from the head",
        )
        self.image = image
