"""Run a command in a private network namespace whose only DNS resolver is a logger on loopback.

    cmd = dns_sink.wrap(log_path, [sys.executable, "-m", "mcp_listen"])

`unshare --net --mount` gives the command a network with nothing but `lo` and a mount table of
its own, where a private resolv.conf (nameserver 127.0.0.1) is bind-mounted over
/etc/resolv.conf. A forked logger answers every query on 127.0.0.1:53 with NXDOMAIN and appends
the queried name to the log, one per line. Before exec'ing the command the wrapper looks up
CANARY itself, so a test can check that the logger really sees lookups (an empty log proves
nothing unless the canary is in it). The logger exits when the command does (its parent changes).

Needs CAP_SYS_ADMIN (root, or a user namespace): `unavailable()` says why it cannot run here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

CANARY = "mcp-listen-canary.example"


def wrap(log: Path, cmd: list[str], *, silent: bool = False) -> list[str]:
    """The command line that runs `cmd` inside the namespace, logging lookups to `log`.

    `silent`: the resolver logs queries but never answers, and resolv.conf keeps glibc's default
    patience (5 s x 2 attempts), as with a DNS server that is down or firewalled.
    """
    mode = ["--silent"] if silent else []
    return [
        "unshare",
        "--net",
        "--mount",
        "--",
        sys.executable,
        str(Path(__file__).resolve()),
        str(log),
        *mode,
        "--",
        *cmd,
    ]


def unavailable() -> str | None:
    """None if a namespace with a private resolv.conf can be built here, else the reason."""
    probe = "ip link set lo up && mount --bind /dev/null /etc/resolv.conf"
    try:
        done = subprocess.run(
            ["unshare", "--net", "--mount", "--", "sh", "-c", probe], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not run: {exc}"
    if done.returncode != 0:
        return f"cannot create a network+mount namespace here (needs root/CAP_SYS_ADMIN): {done.stderr.strip()}"
    return None


def query_name(packet: bytes) -> str:
    """The first question's name of a DNS query packet."""
    labels, i = [], 12
    while i < len(packet) and packet[i]:
        size = packet[i]
        labels.append(packet[i + 1 : i + 1 + size].decode("ascii", "replace"))
        i += 1 + size
    return ".".join(labels)


def nxdomain(packet: bytes) -> bytes:
    """The query turned into an answer: QR set, RD kept, RA set, RCODE 3, no records."""
    flags = bytes([0x80 | (packet[2] & 0x01), 0x83])
    return packet[:2] + flags + packet[4:6] + b"\x00\x00\x00\x00\x00\x00" + packet[12:]


def _serve(sock: socket.socket, log: Path, parent: int, answer: bool) -> None:
    sock.settimeout(0.2)
    with open(log, "a", buffering=1) as out:
        while os.getppid() == parent:
            try:
                packet, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            if len(packet) < 12:
                continue
            out.write(query_name(packet) + "\n")
            if answer:
                sock.sendto(nxdomain(packet), peer)


def _detach_stdio() -> None:
    """The logger must not hold the command's stdin/stdout pipes open."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def main(argv: list[str]) -> None:
    log, *rest = argv
    silent = rest[:1] == ["--silent"]
    sep, *cmd = rest[1:] if silent else rest
    assert sep == "--" and cmd, "usage: dns_sink.py LOG [--silent] -- CMD..."
    log_path = Path(log)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    resolv = log_path.with_name(log_path.name + ".resolv.conf")
    resolv.write_text("nameserver 127.0.0.1\n" + ("" if silent else "options timeout:1 attempts:1\n"))
    subprocess.run(["mount", "--bind", str(resolv), "/etc/resolv.conf"], check=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))
    parent = os.getpid()
    if os.fork() == 0:
        try:
            _detach_stdio()
            _serve(sock, log_path, parent, answer=not silent)
        finally:
            os._exit(0)
    sock.close()
    if silent:
        os.execvp(cmd[0], cmd)  # a canary lookup would wait out the resolver's 10 s
    try:
        socket.getaddrinfo(CANARY, 80, socket.AF_INET)
    except socket.gaierror:
        pass  # NXDOMAIN, as answered
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
