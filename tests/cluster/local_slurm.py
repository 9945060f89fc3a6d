"""A one-node Slurm on localhost for the cluster tests: munged, slurmctld and slurmd started
from a configuration in a temporary directory (none of /etc is used or changed), stopped by
their pids.

    with LocalSlurm(directory) as slurm:       # or LocalSlurm.available() first: why not
        job = slurm.sbatch(["--array=0-3", script], cwd=work, env=env)
        slurm.wait(job)

The node is called localhost (so `scontrol show hostnames` gives a name every process can
connect to), has the machine's CPUs and 90% of its memory, no cgroups (proctrack/linuxproc,
task/none: containers have none to give), and requeued jobs wait 5 s, not 120, before they
start again (AuthInfo cred_expire).
"""
import os
import shutil
import signal
import socket
import subprocess
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def _sbin(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _missing():
    return [n for n in DAEMONS + CLIENTS if not _sbin(n)]


def available():
    """None when Slurm and MUNGE are installed or could be installed now (Debian's slurm-wlm
    and munge, with apt-get as root); else the reason, for a skip message."""
    if not _missing():
        return None
    if os.geteuid() != 0:
        return (f"{', '.join(_missing())} not installed, and not root to install slurm-wlm "
                "and munge (apt-get install slurm-wlm munge)")
    if not shutil.which("apt-get"):
        return f"{', '.join(_missing())} not installed, and no apt-get to install them"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "slurm-wlm", "munge"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:  # a stale package list: update it once
        subprocess.run(["apt-get", "update"], capture_output=True, env=env)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0 or _missing():
        return f"apt-get install slurm-wlm munge failed: {(p.stderr or p.stdout).strip()[-500:]}"
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _memory_mb():
    with open("/proc/meminfo") as f:
        total_kb = int(next(l for l in f if l.startswith("MemTotal:")).split()[1])
    return int(total_kb / 1024 * 0.9)


CONF = """\
ClusterName=mltooltest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge/munge.socket,cred_expire=5
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=3600
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


class LocalSlurm:
    def __init__(self, directory):
        self.dir = os.path.realpath(directory)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        for d in ("munge", "state", "spool", "log"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        os.chmod(os.path.join(self.dir, "munge"), 0o700)  # --force: the tests' 0700 directories
        key = os.path.join(self.dir, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        with open(self.conf, "w") as f:
            f.write(CONF.format(dir=self.dir, ctld_port=_free_port(), slurmd_port=_free_port(),
                                cpus=os.cpu_count(), memory=_memory_mb()))
        m = os.path.join(self.dir, "munge")
        self._daemon([_sbin("munged"), "--foreground", "--force", f"--socket={m}/munge.socket",
                      f"--key-file={key}", f"--pid-file={m}/munged.pid",
                      f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"], "munged")
        self._wait_for(lambda: os.path.exists(f"{m}/munge.socket"), "munged's socket")
        self._daemon([_sbin("slurmctld"), "-D", "-f", self.conf], "slurmctld")
        self._daemon([_sbin("slurmd"), "-D", "-f", self.conf, "-N", "localhost"], "slurmd")
        self._wait_for(self._node_idle, "the node to be idle (sinfo)")

    def _daemon(self, cmd, name):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        self.procs.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                  env=self.env, start_new_session=True)))

    def _node_idle(self):
        p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                           env=self.env)
        return p.returncode == 0 and p.stdout.strip() == "idle"

    def _wait_for(self, ready, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}) while waiting for "
                                       f"{what}: {self.logs()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self, tail=3000):
        out = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out"):
            path = os.path.join(self.dir, "log", name)
            if os.path.exists(path):
                out.append(f"--- {name}\n" + open(path, errors="replace").read()[-tail:])
        return "\n".join(out)

    def stop(self):
        """Cancels the jobs still there (slurmstepd outlives slurmd: a job left running would
        go on after the test), then stops the daemons by pid, slurmd first."""
        if self.procs and all(p.poll() is None for _, p in self.procs):
            try:
                self._cancel_all()
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"local_slurm: cancelling the jobs left: {e}")
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []

    def _cancel_all(self, timeout=30):
        jobs = self.command(["squeue", "-h", "-o", "%A"]).split()
        if not jobs:
            return
        self.command(["scancel", *jobs], check=False)
        deadline = time.time() + timeout
        while self.command(["squeue", "-h", "-o", "%A"]).split() and time.time() < deadline:
            time.sleep(0.5)

    # -- the client commands

    def command(self, args, cwd=None, env=None, check=True):
        p = subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=60,
                           env=dict(self.env, **(env or {})))
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def sbatch(self, args, cwd, env=None):
        """sbatch --parsable ARGS; returns the job id."""
        return self.command(["sbatch", "--parsable", *args], cwd=cwd, env=env).strip()

    def jobs(self, job):
        """{job or array task name (12345 or 12345_3): its scontrol fields} of a job."""
        out = self.command(["scontrol", "-o", "show", "job", job])
        jobs = {}
        for line in out.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            task = fields.get("ArrayTaskId")
            name = f"{fields['ArrayJobId']}_{task}" if task else fields["JobId"]
            jobs[name] = fields
        return jobs

    def wait(self, job, until=None, timeout=240):
        """Waits until every task of `job` is in a final state (or `until(jobs)` holds);
        returns the jobs."""
        deadline = time.time() + timeout
        while True:
            jobs = self.jobs(job)
            if until(jobs) if until else all(j["JobState"] in FINAL for j in jobs.values()):
                return jobs
            if time.time() > deadline:
                raise RuntimeError(f"job {job}: timed out after {timeout} s: "
                                   + "; ".join(f"{k} {v['JobState']} {v.get('Reason')}"
                                               for k, v in sorted(jobs.items())))
            time.sleep(0.5)
