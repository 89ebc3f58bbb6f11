"""Latency of one gradient all_reduce between torchrun workers, as the training loop sees it.

Each worker alternates `--work-ms` milliseconds of busy computation (standing in for a rollout and
its forward/backward) with one `all_reduce` of `--numel` float32 values (the flat gradient that
harness.distributed.average_ sends: ~9.3k for A2C's CartPole network), and reports the mean,
median and 90th percentile time per all_reduce and the mean cycle. With --work-ms 0 it is the
back-to-back latency; with the ~2 ms an A2C update takes here, it is what one update pays. N
workers reach the ideal N x speed-up only if this stays small against the work.

`--socket-baseline` (2 workers on one machine, buffers up to 64 KiB) also times the same exchange
done with a plain TCP socket between the two ranks (each sends its buffer and receives the
other's, TCP_NODELAY, same cadence): the cost of moving the bytes on this machine, without gloo.

Run (one machine, 2 workers):
    torchrun --standalone --nproc-per-node 2 benchmarks/investigations/speed_allreduce.py
    torchrun --standalone --nproc-per-node 2 benchmarks/investigations/speed_allreduce.py --work-ms 0 2 --numel 1 2 16 9348 --socket-baseline
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

import torch
import torch.distributed as dist


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def timed(fn, work_ms: float, calls: int) -> tuple[list[float], float]:
    """Per-call seconds of `fn` after `work_ms` of work each, and the mean cycle in ms."""
    per_call, start = [], time.perf_counter()
    for _ in range(calls):
        busy(work_ms)
        t0 = time.perf_counter()
        fn()
        per_call.append(time.perf_counter() - t0)
    return per_call, (time.perf_counter() - start) / calls * 1e3


def report(what: str, numel: int, work_ms: float, per_call: list[float], cycle_ms: float, world: int) -> None:
    ms = sorted(x * 1e3 for x in per_call)
    line = (f"{what}, {world} workers, {numel:,} floats, {f'{work_ms:g} ms work' if work_ms else 'back to back'}: "
            f"mean {statistics.fmean(ms):.3f} ms, median {ms[len(ms) // 2]:.3f} ms, p90 {ms[int(0.9 * len(ms))]:.3f} ms")
    if work_ms:
        line += f"; cycle {cycle_ms:.2f} ms (bound on the speed-up: {world * work_ms / cycle_ms:.2f}x)"
    print(line, flush=True)


def socket_pair(rank: int) -> socket.socket:
    """A TCP connection between rank 0 and rank 1 (rank 0 listens on a free port it broadcasts)."""
    port = [0]
    if rank == 0:
        server = socket.create_server(("127.0.0.1", 0))
        port = [server.getsockname()[1]]
    dist.broadcast_object_list(port, src=0)
    if rank == 0:
        conn, _ = server.accept()
        server.close()
    else:
        conn = socket.create_connection(("127.0.0.1", port[0]))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


SOCKET_MAX_BYTES = 64 * 1024  # both ranks send before either reads: safe only while it fits the socket buffers


def exchange(conn: socket.socket, out: bytes, into: memoryview) -> None:
    conn.sendall(out)
    got = 0
    while got < len(into):
        n = conn.recv_into(into[got:])
        if n == 0:
            raise ConnectionError("the other rank closed the baseline socket")
        got += n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-ms", type=float, nargs="+", default=[0.0, 2.0], help="busy milliseconds between all_reduces")
    parser.add_argument("--numel", type=int, nargs="+", default=[9348], help="floats per all_reduce")
    parser.add_argument("--calls", type=int, default=1000, help="timed all_reduces per setting")
    parser.add_argument("--socket-baseline", action="store_true", help="also time a plain TCP exchange of the same bytes (2 workers)")
    opts = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if opts.socket_baseline and world != 2 and rank == 0:
        print(f"--socket-baseline needs exactly 2 workers, not {world}: skipped", flush=True)
    conn = socket_pair(rank) if opts.socket_baseline and world == 2 else None
    for numel in opts.numel:
        t = torch.ones(numel)
        out, into = t.numpy().tobytes(), memoryview(bytearray(4 * numel))
        if conn is not None and 4 * numel > SOCKET_MAX_BYTES and rank == 0:
            print(f"socket baseline skipped for {numel:,} floats (over {SOCKET_MAX_BYTES // 1024} KiB)", flush=True)
        for work_ms in opts.work_ms:
            t.fill_(1.0)  # the in-place sums double it every call
            for _ in range(50):  # warm-up
                dist.all_reduce(t)
            dist.barrier()
            per_call, cycle_ms = timed(lambda: dist.all_reduce(t), work_ms, opts.calls)
            if rank == 0:
                report("gloo all_reduce", numel, work_ms, per_call, cycle_ms, world)
            if conn is not None and 4 * numel <= SOCKET_MAX_BYTES:
                dist.barrier()
                per_call, cycle_ms = timed(lambda: exchange(conn, out, into), work_ms, opts.calls)
                if rank == 0:
                    report("plain TCP exchange", numel, work_ms, per_call, cycle_ms, world)
    if conn is not None:
        conn.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
