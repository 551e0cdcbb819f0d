"""fovea.distributed on a Dask LocalCluster (2 worker processes x 1 thread, loopback): outputs
identical to the serial run and to the batch CLI, also when a worker is killed mid-run."""
import os
import signal
import tarfile
import time

import pytest

import fovea.distributed as fd
from pyhelpers import cli, photo, save_png

OPTIONS = dict(budget=64, model="random:vit-s16", threads=1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    os.makedirs(root / "imgs")
    files = [save_png(photo(s, 160, 200), str(root / "imgs" / f"img{s:02d}.png")) for s in range(8)]
    with tarfile.open(root / "shard-a.tar", "w") as t:
        for i, f in enumerate(files[:3]):
            t.add(f, f"k{i:03d}.png")
    return root, files


def read_outputs(outdir):
    """{name: bytes}; shard members by name (tar headers carry times)."""
    out = {}
    for n in sorted(os.listdir(outdir)):
        p = os.path.join(outdir, n)
        if n.endswith(".tar"):
            with tarfile.open(p) as t:
                for m in t.getmembers():
                    out[f"{n}:{m.name}"] = t.extractfile(m).read()
        else:
            out[n] = open(p, "rb").read()
    return out


@pytest.fixture(scope="module")
def serial(dataset, tmp_path_factory):
    root, _ = dataset
    out = tmp_path_factory.mktemp("serial")
    s = fd.run([str(root / "imgs"), str(root / "shard-a.tar")], str(out), batch_size=2, **OPTIONS)
    assert s["ok"] == 11 and s["failed"] == 0
    return read_outputs(out)


def test_serial_equals_batch_cli(dataset, serial, tmp_path):
    root, _ = dataset
    out = tmp_path / "cli"
    cli("encode", root / "imgs", root / "shard-a.tar", "--model", "random:vit-s16", "--budget", 64, "--threads", 1,
        "-o", out)
    assert read_outputs(out) == serial


def test_local_cluster_with_a_killed_worker(dataset, serial, tmp_path):
    distributed = pytest.importorskip("distributed")
    root, _ = dataset
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        # fovea's default threads per task: the host's cores shared by its task slots (2 here).
        cpus = len(os.sched_getaffinity(0))
        slots = fd._slots_per_host(client)
        assert slots == {"127.0.0.1": 2}
        assert set(client.run(fd._worker_threads, 0, slots).values()) == {max(1, cpus // 2)}
        out = tmp_path / "dask"
        os.makedirs(out)
        tasks = fd.plan([str(root / "imgs"), str(root / "shard-a.tar")], str(out), batch_size=1)
        futures = client.map(fd.run_task, tasks, options=OPTIONS, retries=3, pure=False)
        # Kill a worker process while it runs a task (Dask reschedules that task elsewhere).
        pids = client.run(os.getpid)
        killed = None
        deadline = time.monotonic() + 60
        while killed is None and time.monotonic() < deadline:
            busy = {w: ts for w, ts in client.processing().items() if ts and w in pids}
            done = sum(f.done() for f in futures)
            if busy and done >= 1:
                worker = sorted(busy)[0]
                os.kill(pids[worker], signal.SIGKILL)
                killed = worker
            time.sleep(0.02)
        assert killed is not None, "no worker was busy to kill"
        results = client.gather(futures)
        assert sum(r["ok"] for r in results) == 11 and not any(r["failed"] for r in results)
        assert read_outputs(out) == serial
        assert not [n for n in os.listdir(out) if ".tmp" in n]  # no half-written file left


def test_module_command_line(dataset, tmp_path):
    root, files = dataset
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "fovea.distributed", files[0], files[1], "-o", str(tmp_path / "o"),
                        "--serial", "--budget", "64", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "o")) == ["img00.safetensors", "img01.safetensors"]
    r = subprocess.run([sys.executable, "-m", "fovea.distributed", str(tmp_path / "missing"), "-o", str(tmp_path / "x"),
                        "--serial"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("fovea: error:")


def test_wait_policy_warning(monkeypatch):
    """Several OpenMP threads with libgomp's spinning default: the task's record says so."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setattr(fd, "_WARNED_WAIT_POLICY", False)
    assert fd._check_wait_policy(1, {"model": "m"}) is None  # one thread: no team, nothing spins
    assert fd._check_wait_policy(2, {}) is None  # tokenize only: no OpenMP code
    note = fd._check_wait_policy(2, {"model": "m"})
    assert note and "OMP_WAIT_POLICY=PASSIVE" in note
    assert fd._check_wait_policy(2, {"model": "m"}) is None  # once per process
    monkeypatch.setattr(fd, "_WARNED_WAIT_POLICY", False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert fd._check_wait_policy(2, {"model": "m"}) is None
