"""Hosts for the deploy tier: Linux network namespaces on this machine, each one a
"machine" with its own address on a bridge, an sshd, and its own disk.

A host is a network namespace (`rafka-<name>`) joined to the bridge `rafka-br0`
(10.231.0.1/24, in this machine's namespace, so the driver reaches every host; the
hosts' default route is on-link with no gateway, so nothing is routed beyond the
bridge). Its sshd runs as the first process of a PID namespace (`ray stop` on one
host ends that host's Ray only: it finds Ray's processes by name among all it can
see; and when the sshd ends, so does everything the host ran) and in a mount
namespace where three directories are the host's, not this machine's: /root (its
home: ~/.ssh, ~/.ray with the auth token, ~/.bashrc, what `ray up` puts there), /tmp
(Ray's session dirs, the local provider's state) and /var/lib/rafka (the data dir
cluster.yaml names). Every ssh session, and every process Ray starts from one,
inherits that view: a worker stopped and started again finds its own disk. The
directories behind them live under this run's base dir, per host.

What a host must still see of this machine (the Python installation, the venv and
the rafka sources being tested) is bound back into its private directories at the
same paths, so the hosts run the same installation: like a shared NFS install.

Everything here is this run's own: the namespaces, the bridge, the sshd processes
and whatever ran inside them are found by namespace (`ip netns pids`) and ended in
`close()`, which the fixture calls even when the test failed.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET_PREFIX = "10.231.0"
BRIDGE = "rafka-br0"
BRIDGE_ADDRESS = f"{SUBNET_PREFIX}.1"
NETNS_PREFIX = "rafka-"
# The directories a host owns (its mount namespace binds them over this machine's).
# /tmp comes last, and the base dir is not under it: sshd reads its config from there.
PRIVATE_DIRS = ("/root", "/var/lib/rafka", "/tmp")


@dataclasses.dataclass(frozen=True)
class Host:
    name: str           # "head", "worker1", ...
    address: str        # on the bridge
    root: Path          # this host's directories: home/, var-lib-rafka/, tmp/, sshd_config

    @property
    def netns(self) -> str:
        return NETNS_PREFIX + self.name

    @property
    def veth(self) -> str:   # the bridge's end of the host's link (15 characters at most)
        return "rafka-v" + self.address.rsplit(".", 1)[1]

    def private_dir(self, path: str) -> Path:
        """Where this host's `path` (one of PRIVATE_DIRS) lives on this machine."""
        return self.root / path.strip("/").replace("/", "-")


def run(command: list[str], *, timeout_s: float = 60.0, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=check, **kwargs)


def wait_until(condition, *, timeout_s: float, what: str, interval_s: float = 0.5):
    """Poll `condition` until it returns something true (returned); AssertionError
    naming `what` and the last exception after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:   # noqa: BLE001 (a host still starting: "not yet")
            last_error = error
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f}s (last error: {last_error!r})")
        time.sleep(interval_s)


class NamespaceHosts:
    """`head` at .10 and `workers` at .11, .12, ...: call start(), then close()."""

    def __init__(self, base: Path, *, workers: int, shared_paths: list[Path], ssh_public_key: str,
                 ssh_private_key: Path) -> None:
        self.base = base
        self.ssh_private_key = ssh_private_key
        self.host_key = base / "ssh_host_ed25519_key"   # the hosts' own, not this machine's
        self.shadow: Path | None = None
        self._sshds: list[subprocess.Popen] = []   # `ip netns exec ... sshd`, one per host
        self.head = Host("head", f"{SUBNET_PREFIX}.10", base / "head")
        self.workers = [Host(f"worker{i}", f"{SUBNET_PREFIX}.{10 + i}", base / f"worker{i}")
                        for i in range(1, workers + 1)]
        self.shared_paths = sorted({p.resolve() for p in shared_paths})
        self.ssh_public_key = ssh_public_key

    @property
    def hosts(self) -> list[Host]:
        return [self.head, *self.workers]

    def start(self) -> None:
        leftovers = [name for name in run(["ip", "netns", "list"]).stdout.split()
                     if name.startswith(NETNS_PREFIX)]
        if leftovers or run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
            raise RuntimeError(f"namespaces {leftovers} or bridge {BRIDGE} exist already: another deploy "
                               f"run is going on (or one was killed: `ip netns del` them, `ip link del {BRIDGE}`)")
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        # Traffic between the hosts stays off this machine's firewall (with br_netfilter on,
        # Docker's FORWARD policy DROP would drop it); older kernels lack the option.
        run(["ip", "link", "set", BRIDGE, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0",
             "nf_call_arptables", "0"], check=False)
        run(["ip", "addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # sshd's privilege separation dir
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.host_key)])
        self.shadow = self._unlocked_root_shadow()
        for host in self.hosts:
            self._start_host(host)
        for host in self.hosts:
            wait_until(lambda h=host: self.ssh(h, "true", timeout_s=10).returncode == 0,
                       timeout_s=30, what=f"sshd on {host.name} ({host.address})")

    def _start_host(self, host: Host) -> None:
        for path in PRIVATE_DIRS:
            host.private_dir(path).mkdir(parents=True, mode=0o700)
        home = host.private_dir("/root")
        (home / ".ssh").mkdir(mode=0o700)
        (home / ".ssh" / "authorized_keys").write_text(self.ssh_public_key)
        host.private_dir("/tmp").chmod(0o1777)
        config = host.root / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {host.address}", "Port 22",
            f"HostKey {self.host_key}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "AuthorizedKeysFile .ssh/authorized_keys", "UsePAM no",
            # `ray up` and the head's autoscaler open many sessions at once
            "MaxStartups 100", "MaxSessions 100",
            f"PidFile {host.root / 'sshd.pid'}", "Subsystem sftp internal-sftp", ""]))
        run(["ip", "netns", "add", host.netns])
        run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
        run(["ip", "link", "set", host.veth, "master", BRIDGE])
        run(["ip", "link", "set", host.veth, "up"])
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "eth0", "up"],
                        ["ip", "addr", "add", f"{host.address}/24", "dev", "eth0"],
                        # on-link, no gateway: Ray finds its node address by routing towards a
                        # public address, and no packet leaves the bridge (nothing routes it on)
                        ["ip", "route", "add", "default", "dev", "eth0"]):
            run(["ip", "netns", "exec", host.netns, *command])
        # The sshd's own mount namespace: bind the shared paths into the host's private
        # dirs, then the private dirs over this machine's (rbind keeps those binds).
        binds = []
        for path in PRIVATE_DIRS:
            for shared in self.shared_paths:
                if shared.is_relative_to(path) and shared != Path(path):
                    target = host.private_dir(path) / shared.relative_to(path)
                    target.mkdir(parents=True, exist_ok=True)
                    binds.append(f"mount --bind {shlex.quote(str(shared))} {shlex.quote(str(target))}")
        if self.shadow is not None:
            binds.append(f"mount --bind {shlex.quote(str(self.shadow))} /etc/shadow")
        for path in PRIVATE_DIRS:
            Path(path).mkdir(parents=True, exist_ok=True)   # /var/lib/rafka: a mount point on this machine
            binds.append(f"mount --rbind {shlex.quote(str(host.private_dir(path)))} {path}")
        script = " && ".join([*binds, f"exec /usr/sbin/sshd -D -e -f {shlex.quote(str(config))}"])
        with open(host.root / "sshd.log", "wb") as log:
            self._sshds.append(subprocess.Popen(
                ["ip", "netns", "exec", host.netns, "unshare", "--mount", "--propagation", "private",
                 "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True))

    def _unlocked_root_shadow(self, machine_shadow: Path = Path("/etc/shadow")) -> Path | None:
        """An /etc/shadow for the hosts where root's password is "*" (no password)
        rather than "!" (locked), or None when it is not locked. Without PAM, sshd
        refuses every login, keys included, to an account locked with "!" (OpenSSH's
        allowed_user()), as root is on some fresh machines; with PAM, Debian's
        pam_loginuid fails in containers. Only the hosts' mount namespaces see it."""
        lines = machine_shadow.read_text().splitlines(keepends=True)
        root = next((i for i, line in enumerate(lines) if line.startswith("root:")), None)
        if root is None or not lines[root].split(":")[1].startswith("!"):
            return None
        fields = lines[root].split(":")
        fields[1] = "*"
        lines[root] = ":".join(fields)
        shadow = self.base / "shadow"
        shadow.touch(mode=0o600)
        shadow.write_text("".join(lines))
        return shadow

    # --- running commands on a host --------------------------------------------------

    def ssh_command(self, host: Host, command: str) -> list[str]:
        """ssh into `host` and run `command` as Ray's command runner does: a login,
        interactive bash that has sourced ~/.bashrc (where cluster.yaml's setup puts
        rafka's venv on the PATH)."""
        wrapped = f"source ~/.bashrc 2>/dev/null; {command}"
        return ["ssh", "-i", str(self.ssh_private_key), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=5", f"root@{host.address}",
                "bash --login -c -i " + shlex.quote(wrapped)]

    def ssh(self, host: Host, command: str, *, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        return run(self.ssh_command(host, command), timeout_s=timeout_s, check=False, stdin=subprocess.DEVNULL)

    def ssh_ok(self, host: Host, command: str, *, timeout_s: float = 120.0) -> str:
        done = self.ssh(host, command, timeout_s=timeout_s)
        if done.returncode != 0:
            raise AssertionError(f"on {host.name}: {command!r} exited {done.returncode}\n"
                                 f"stdout: {done.stdout}\nstderr: {done.stderr}")
        return done.stdout

    def pids(self, host: Host) -> list[int]:
        done = run(["ip", "netns", "pids", host.netns], check=False)
        return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []

    # --- teardown --------------------------------------------------------------------

    def close(self) -> None:
        """End every process in the hosts' namespaces (sshd, Ray), then remove the
        namespaces, the bridge and the hosts' directories. Safe to call twice, and
        after a start() that failed half-way."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for host in self.hosts:
                for pid in self.pids(host):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            try:
                wait_until(lambda: not any(self.pids(h) for h in self.hosts), timeout_s=10,
                           what="the hosts' processes ending", interval_s=0.2)
                break
            except AssertionError:
                continue
        for sshd in self._sshds:   # reaped (each ended above, with its namespace's processes)
            try:
                sshd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for host in self.hosts:
            run(["ip", "netns", "del", host.netns], check=False)
        run(["ip", "link", "del", BRIDGE], check=False)
        # Every mount was in a namespace now gone: from here the dirs are plain dirs.
        shutil.rmtree(self.base, ignore_errors=True)


def collect_logs(hosts: NamespaceHosts, dest: Path) -> None:
    """Keep what explains a failure after close(): each host's Ray logs (its last
    session) and sshd log, and the driver's command logs."""
    for host in hosts.hosts:
        # every Ray session the host ran (one per `ray start`: before and after restarts)
        for session in sorted((host.private_dir("/tmp") / "ray").glob("session_2*")):
            if (session / "logs").is_dir():
                shutil.copytree(session / "logs", dest / host.name / session.name,
                                ignore=shutil.ignore_patterns("events", "old", "*.sock"), symlinks=True)
        if (host.root / "sshd.log").exists():
            (dest / host.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(host.root / "sshd.log", dest / host.name / "sshd.log")
    driver_logs = hosts.base / "driver" / "logs"
    if driver_logs.is_dir():
        shutil.copytree(driver_logs, dest / "driver", dirs_exist_ok=True)
