#!/usr/bin/python3
"""torchbus-train across two "hosts": two network namespaces joined by a veth pair, each with an
address of its own, two ranks on each, started with torchrun's multi-node variables (RANK,
LOCAL_RANK, GROUP_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR on the first host's address)
and GLOO_SOCKET_IFNAME naming each host's interface. Checks:

  1. the 2x2 run (batch 16 per rank) ends as one process with the whole batch (64) does, within
     the tolerance of the two-rank tests (validation loss 1e-3, accuracy 0.02);
  2. the second host's ranks SIGKILLed mid-run make the first host's exit 1 within 15 s, naming a
     rank of the second host;
  3. the run then resumes on the first host's two ranks with batch 32 (the same global batch) and
     finishes, its summary listing both segments (4 ranks, then 2).

It creates the namespaces and removes them (and ends the ranks it started), whatever happens.
Only addresses inside them are used. Without root, `ip`, or the right to make namespaces (a
container without CAP_NET_ADMIN), it prints why and exits 77 (ctest's SKIP_RETURN_CODE).

    two_hosts.py --train build/release/apps/torchbus-train/torchbus-train --work /tmp/two_hosts
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77


def sh(*command):
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Hosts:
    """Two namespaces, host A at 10.77.N.1 and host B at 10.77.N.2, joined by a veth pair."""

    def __init__(self):
        tag = os.getpid() % 10000
        self.subnet = 10 + os.getpid() % 240
        self.names = ["tbA%d" % tag, "tbB%d" % tag]
        self.links = ["tbvA%d" % tag, "tbvB%d" % tag]
        self.addresses = ["10.77.%d.1" % self.subnet, "10.77.%d.2" % self.subnet]
        self.processes = []  # every rank started, killed at the exit if still running

    def __enter__(self):
        try:
            for name in self.names:
                sh("ip", "netns", "add", name)
            sh("ip", "link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1])
            for name, link, address in zip(self.names, self.links, self.addresses):
                sh("ip", "link", "set", link, "netns", name)
                sh("ip", "-n", name, "addr", "add", address + "/24", "dev", link)
                sh("ip", "-n", name, "link", "set", "lo", "up")
                sh("ip", "-n", name, "link", "set", link, "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for name in self.names:  # removing a namespace removes its end of the veth pair too
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)

    def start(self, train, flags, ranks_per_host, hosts, port, logs):
        """Starts ranks_per_host ranks on each of `hosts` (indices) with torchrun's variables."""
        world = ranks_per_host * len(hosts)
        processes = []
        for group_rank, host in enumerate(hosts):
            for local in range(ranks_per_host):
                rank = group_rank * ranks_per_host + local
                environment = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local),
                                   GROUP_RANK=str(group_rank), ROLE_RANK=str(rank),
                                   LOCAL_WORLD_SIZE=str(ranks_per_host), WORLD_SIZE=str(world),
                                   ROLE_WORLD_SIZE=str(world), MASTER_ADDR=self.addresses[hosts[0]],
                                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME=self.links[host])
                log = open(os.path.join(logs, "rank%d.log" % rank), "w")
                processes.append(subprocess.Popen(
                    ["ip", "netns", "exec", self.names[host], train] + flags,
                    env=environment, stdout=log, stderr=subprocess.STDOUT))
        self.processes += processes
        return processes


def summary(out):
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for_line(path, text, limit=180):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in read(path):
            return True
        time.sleep(0.01)
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--work", required=True)
    options = parser.parse_args()
    if os.geteuid() != 0 or shutil.which("ip") is None:
        print("two_hosts: skipped: network namespaces need root and iproute2's ip "
              "(euid %d, ip %s)" % (os.geteuid(), shutil.which("ip")))
        return SKIP
    shutil.rmtree(options.work, ignore_errors=True)
    os.makedirs(options.work)
    failures = []

    def check(condition, message):
        print(("ok: " if condition else "FAILED: ") + message)
        if not condition:
            failures.append(message)

    base = ["--threads", "1", "--no-progress", "--log-every", "1"]
    try:
        hosts = Hosts().__enter__()
    except subprocess.CalledProcessError as error:
        print("two_hosts: skipped: cannot make the network namespaces (%s: %s)" %
              (" ".join(error.cmd), error.stderr.decode(errors="replace").strip()))
        return SKIP
    try:
        # 1. 2x2 ranks of batch 16 against one process of batch 64.
        short = base + ["--epochs", "2", "--max-steps", "60"]
        alone = os.path.join(options.work, "alone")
        subprocess.run([options.train] + short + ["--batch-size", "64", "--out", alone],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        pairs = os.path.join(options.work, "pairs")
        logs = os.path.join(options.work, "pairs_logs")
        os.makedirs(logs)
        ranks = hosts.start(options.train, short + ["--batch-size", "16", "--out", pairs], 2,
                            [0, 1], 29000 + os.getpid() % 1000, logs)
        codes = [process.wait(timeout=300) for process in ranks]
        check(codes == [0, 0, 0, 0], "the 2x2 run ends with exit 0 on every rank: %s\n%s" %
              (codes, read(os.path.join(logs, "rank0.log"))[-2000:]))
        if codes == [0, 0, 0, 0]:
            one, four = summary(alone), summary(pairs)
            check(four["world_size"] == 4 and four["steps"] == one["steps"],
                  "4 ranks made the steps of one process: %s" % four["steps"])
            check(abs(four["final_val_loss"] - one["final_val_loss"]) < 1e-3,
                  "validation loss %.6f vs one process %.6f" %
                  (four["final_val_loss"], one["final_val_loss"]))
            check(abs(four["final_val_accuracy"] - one["final_val_accuracy"]) <= 0.02,
                  "validation accuracy %.4f vs one process %.4f" %
                  (four["final_val_accuracy"], one["final_val_accuracy"]))

        # 2. Host B's ranks killed mid-run; host A's exit naming them.
        long = base + ["--epochs", "10", "--max-steps", "600", "--checkpoint-every", "20",
                       "--hidden", "256", "256"]
        out = os.path.join(options.work, "killed")
        logs = os.path.join(options.work, "killed_logs")
        os.makedirs(logs)
        ranks = hosts.start(options.train, long + ["--batch-size", "16", "--out", out], 2, [0, 1],
                            30000 + os.getpid() % 1000, logs)
        under_way = wait_for_line(os.path.join(out, "train.log"), "step 50 ")
        for process in ranks[2:]:
            # `ip netns exec` runs the program in its own process (it execs it): kill that.
            process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        codes = []
        for process in ranks[:2]:
            try:
                codes.append(process.wait(timeout=60))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(None)
        seconds = time.monotonic() - killed_at
        for process in ranks[2:]:
            process.wait()
        check(under_way, "training was under way on 4 ranks (step 50 logged)")
        check(codes == [1, 1], "host A's ranks exit 1: %s" % codes)
        check(seconds < 15, "host A's ranks exit within 15 s of the kill: %.1f s" % seconds)
        survivor = read(os.path.join(logs, "rank0.log")) + read(os.path.join(logs, "rank1.log"))
        check(any(name in survivor for name in ("rank 2", "rank 3", "ranks 2, 3")),
              "host A's ranks name host B's ranks:\n" + survivor[-1500:])

        # 3. The run resumes on host A's two ranks with the same global batch.
        logs = os.path.join(options.work, "resumed_logs")
        os.makedirs(logs)
        ranks = hosts.start(options.train, long + ["--batch-size", "32", "--out", out, "--resume"],
                            2, [0], 31000 + os.getpid() % 1000, logs)
        codes = [process.wait(timeout=300) for process in ranks]
        check(codes == [0, 0], "the resume on host A's two ranks ends with exit 0: %s\n%s" %
              (codes, read(os.path.join(logs, "rank0.log"))[-2000:]))
        if codes == [0, 0]:
            resumed = summary(out)
            segments = [(s["world_size"], s["batch_size"]) for s in resumed["segments"]]
            check(resumed["steps"] == 600, "the resumed run finished its 600 steps: %s" %
                  resumed["steps"])
            check(segments == [(4, 16), (2, 32)], "its segments: %s" % segments)
            check("resuming a checkpoint of 4 ranks on 2" in read(os.path.join(logs, "rank0.log")),
                  "the log says how the run was resharded")
    finally:
        hosts.__exit__()
    print("two_hosts: %d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
