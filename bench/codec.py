"""What the wire costs per item: encoding and decoding a data frame (ns per tuple), and decoding and
applying an acker's frames (ns per acker message).

The data frame is what a busy worker of the word count sends another (``bench/wordcount.py``'s spec,
2 workers): word tuples from one split task to one count task, each anchored to one tree. The acker
frames are what an acker's home sends it: one with each tree's INIT (its acks folded in), a later
one with the ACK that completes it; the acker executor applies them and sends the verdicts. One
process, the compiled path unless ``SQUALL_PURE_PYTHON=1``; the best of ``--repeat`` rounds, so the
figures are the code's own cost, not the machine's noise.

    python bench/codec.py [--tuples 240] [--repeat 7]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wordcount import VOCABULARY, spec  # noqa: E402
from squall._pure import compiled  # noqa: E402
from squall.acker.acker import ACK, INIT, AckerMessage  # noqa: E402
from squall.executor.acker import AckerExecutor  # noqa: E402
from squall.executor.base import Transfer  # noqa: E402
from squall.topology import Plan, TopologySpec  # noqa: E402
from squall.transport import codec  # noqa: E402
from squall.transport.codec import Decoder, encode_acker, encode_tuples  # noqa: E402
from squall.tuples import Tuple  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=240, help="tuples per frame")
    parser.add_argument("--repeat", type=int, default=7, help="rounds; the best is printed")
    args = parser.parse_args()
    plan = Plan(TopologySpec.from_dict(spec(workers=2, ackers=2)))
    split, count = plan.component_tasks["split"], plan.component_tasks["count"]
    fields = plan.stream_fields("split", "default")
    decoder = Decoder(plan, bolt_tasks=frozenset(split + count), acker_tasks=frozenset(),
                      spout_tasks=frozenset(plan.component_tasks["sentences"]))
    rng = random.Random(1)
    tuples = [Tuple([rng.choice(VOCABULARY)], fields, "split", "default", split[0],
                    {rng.getrandbits(64): rng.getrandbits(64)}, count[1]) for _ in range(args.tuples)]
    frame = encode_tuples(tuples)
    assert len(decoder.decode(frame)) == args.tuples
    loops = max(1, 72_000 // args.tuples)
    encode = decode = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _ in range(loops):
            encode_tuples(tuples)
        t1 = time.perf_counter()
        for _ in range(loops):
            decoder.decode(frame)
        t2 = time.perf_counter()
        encode = min(encode, (t1 - t0) / loops / args.tuples * 1e9)
        decode = min(decode, (t2 - t1) / loops / args.tuples * 1e9)
    print(f"{'compiled' if compiled(codec) else 'pure Python'} codec, {args.tuples} word tuples a frame "
          f"({len(frame):,} bytes): encoding {encode:.0f} ns per tuple, decoding {decode:.0f} ns per tuple")
    print(f"acker frames of {args.tuples} messages: decoding and applying {acker_frames(plan, rng, args):.0f} ns "
          "per message (verdicts sent included)")


def acker_frames(plan: Plan, rng: random.Random, args: argparse.Namespace) -> float:
    spout, acker = plan.component_tasks["sentences"][0], plan.acker_tasks[0]
    decoder = Decoder(plan, bolt_tasks=frozenset(), spout_tasks=frozenset(), acker_tasks=frozenset({acker}))
    frames = []
    n = len(plan.acker_tasks)
    for _ in range(20):
        # roots this acker tracks (acker task acker_tasks[root % n]): its decoder refuses any other
        trees = [((rng.getrandbits(62) + 2) * n, rng.getrandbits(64) | 1) for _ in range(args.tuples)]
        frames.append(encode_acker([AckerMessage(INIT, root, val, spout) for root, val in trees]))
        frames.append(encode_acker([AckerMessage(ACK, root, val, -1) for root, val in trees]))
    best = float("inf")
    for _ in range(args.repeat):
        transfer = Transfer(capacity=1 << 30)
        executor = AckerExecutor(task=acker, transfer=transfer)
        verdicts: deque = deque()
        transfer.register(spout, verdicts)
        t0 = time.perf_counter()
        for frame in frames:
            for _, item in decoder.decode(frame):
                executor.inbox.append(item)
            executor.run_once(0.0)
        best = min(best, (time.perf_counter() - t0) / (len(frames) * args.tuples) * 1e9)
        assert len(verdicts) == len(frames) // 2 * args.tuples
    return best


if __name__ == "__main__":
    main()
