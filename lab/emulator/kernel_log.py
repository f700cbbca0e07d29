"""`dmesg` and `journalctl -k` on a lab node: its own kernel log, not this machine's.

The log is a file (`SPARK_LAB_KERNEL_LOG`, one `seconds<TAB>text` line per kernel message,
seconds since the node's boot) that the lab writes (`lab/node_boot.py`): a new boot empties it.
The formats are the real tools' (util-linux dmesg: `[%5d.%06d] text`; journalctl
`-o short-monotonic`: `[%5d.%06d] host kernel: text`). Where the node's kernel log is not
readable by its SSH user (the file `SPARK_LAB_KERNEL_LOG_RESTRICTED` exists: a user without
CAP_SYSLOG under kernel.dmesg_restrict=1, outside the adm and systemd-journal groups), they
answer as the real ones do: dmesg fails with `dmesg: read kernel buffer failed: Operation not
permitted`, exit 1; journalctl exits 0 with its hint on stderr and no entries.

journalctl knows only what spark-bot asks: `-k`, `-b 0` (this boot), `-o short-monotonic`,
`--no-pager`, `-n N`, `-q`; anything else is refused as journalctl refuses an unknown option.
"""

import os
import socket
import sys

_LOG = "SPARK_LAB_KERNEL_LOG"
_RESTRICTED = "SPARK_LAB_KERNEL_LOG_RESTRICTED"
_HINT = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
    "      Pass -q to turn off this notice.\n"
)


def _restricted():
    path = os.environ.get(_RESTRICTED, "")
    return bool(path) and os.path.exists(path)


def _records():
    path = os.environ.get(_LOG, "")
    try:
        with open(path) as f:
            raw = f.read().splitlines()
    except OSError:
        return []
    records = []
    for line in raw:
        seconds, sep, text = line.partition("\t")
        if sep:
            try:
                records.append((float(seconds), text))
            except ValueError:
                continue
    return records


def _stamp(seconds):
    whole = int(seconds)
    return "[%5d.%06d]" % (whole, round((seconds - whole) * 1e6) % 1000000)


def dmesg_main(argv):
    if argv:
        sys.stderr.write("dmesg: the lab's dmesg takes no options (spark-bot passes none)\n")
        return 1
    if _restricted():
        sys.stderr.write("dmesg: read kernel buffer failed: Operation not permitted\n")
        return 1
    for seconds, text in _records():
        sys.stdout.write("%s %s\n" % (_stamp(seconds), text))
    return 0


def journalctl_main(argv):
    kernel, boot, output, lines, quiet = False, None, "short", None, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-k", "--dmesg"):
            kernel = True
        elif a in ("-b", "--boot") and i + 1 < len(argv):
            boot = argv[i + 1]
            i += 1
        elif a in ("-o", "--output") and i + 1 < len(argv):
            output = argv[i + 1]
            i += 1
        elif a in ("-n", "--lines") and i + 1 < len(argv):
            lines = int(argv[i + 1])
            i += 1
        elif a == "--no-pager":
            pass
        elif a in ("-q", "--quiet"):
            quiet = True
        else:
            sys.stderr.write("journalctl: unrecognized option '%s'\n" % a)
            return 1
        i += 1
    if not kernel or boot not in (None, "0") or output != "short-monotonic":
        sys.stderr.write("journalctl: the lab's journalctl shows only -k -b 0 -o short-monotonic\n")
        return 1
    if _restricted():
        if not quiet:
            sys.stderr.write(_HINT)
        sys.stdout.write("-- No entries --\n")
        return 0
    records = _records()
    if lines is not None:
        records = records[-lines:] if lines > 0 else []
    if not records:
        sys.stdout.write("-- No entries --\n")
    host = socket.gethostname()
    for seconds, text in records:
        sys.stdout.write("%s %s kernel: %s\n" % (_stamp(seconds), host, text))
    return 0
