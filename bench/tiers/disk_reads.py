"""Random direct reads of this machine's disk: reads/s and CPU time per read, by reader threads.

What a storage-backed FeatureStore (docs/storage.md) can get from the disk: ``--block``-byte
``os.preadv`` calls at random block-aligned offsets of a file (``O_DIRECT``: past the page cache),
from ``--threads`` threads at once, as the store's direct reader issues them. CPU time per read
(user and system, of this process) says what the reads take from training on the same cores.

    python bench/tiers/disk_reads.py --file PATH [--size-mib 256] [--block 512] [--threads 1,4,8,16,32] [--reads 40000]

``--file`` is written (random bytes, ``--size-mib``) when it does not exist, and left in place.
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: common.py
from common import RESULTS, command_line, machine, write_results  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, type=Path, help="the file read (written first when missing)")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--block", type=int, default=512, help="bytes a read (a multiple of the disk's logical block)")
    parser.add_argument("--threads", default="1,4,8,16,32")
    parser.add_argument("--reads", type=int, default=40_000, help="reads per thread count")
    parser.add_argument("--out-dir", default=str(RESULTS))
    parser.add_argument("--stem", default="disk_reads")
    args = parser.parse_args(argv)
    if not args.file.exists():
        with args.file.open("wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
    fd = os.open(args.file, os.O_RDONLY | os.O_DIRECT)
    try:
        blocks = os.fstat(fd).st_size // args.block
        rows = [measure(fd, blocks, args.block, int(t), args.reads) for t in args.threads.split(",")]
    finally:
        os.close(fd)
    for r in rows:
        print(
            f"{r['threads']:>3} threads: {r['reads_per_s']:,.0f} reads/s, CPU {r['user_us_per_read']:.1f} + {r['sys_us_per_read']:.1f} us (user + sys) a read"
        )
    meta = {"command": command_line(), "machine": machine(), "file": f"{args.file} ({blocks * args.block / 2**20:.0f} MiB)", "block": args.block}
    write_results(args.stem, rows, meta, folder=args.out_dir)


def measure(fd: int, blocks: int, block: int, threads: int, reads: int) -> dict:
    """``reads`` reads of ``block`` bytes at random aligned offsets, split over ``threads`` threads."""

    def read(n: int) -> None:
        buffer = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
        draw = random.Random()
        for _ in range(n):
            os.preadv(fd, [buffer], draw.randrange(blocks) * block)

    per = reads // threads
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(read, [per] * threads))
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    done = per * threads
    return {
        "threads": threads,
        "block": block,
        "reads": done,
        "reads_per_s": done / seconds,
        "user_us_per_read": (after.ru_utime - before.ru_utime) / done * 1e6,
        "sys_us_per_read": (after.ru_stime - before.ru_stime) / done * 1e6,
    }


if __name__ == "__main__":
    main()
