#!/usr/bin/python3
"""dist_model_test.py - bench/dist_model.py's arithmetic against cases computed by hand:
the ring's volume, the bus bandwidth read off a curve, the buckets, the hidden share
and its cap, a whole row, the inputs read from a log and the refusals."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import dist_model as m  # noqa: E402

MIB = 2**20


class Arithmetic(unittest.TestCase):
    def test_ring_time(self):
        # 2(n-1)/n x S / B: 2 x 7/8 x 1 GB / 100 GB/s = 17.5 ms
        self.assertAlmostEqual(m.ring_time(1e9, 8, 100e9), 0.0175, places=12)
        # two ranks: S / B = 1 MB / 50 GB/s = 20 us
        self.assertAlmostEqual(m.ring_time(1e6, 2, 50e9), 2e-5, places=15)
        # four ranks: 1.5 x 4 MB / 200 GB/s = 30 us
        self.assertAlmostEqual(m.ring_time(4e6, 4, 200e9), 3e-5, places=15)
        self.assertEqual(m.ring_time(1e9, 1, 1e9), 0.0)

    def test_busbw_curve(self):
        t = [(1 * MIB, 72.45), (2 * MIB, 91.48), (4 * MIB, 139.97)]
        self.assertAlmostEqual(m.busbw_at(2 * MIB, t), 91.48e9, delta=1)
        # halfway in log(payload) between two points: the geometric mean of their values
        self.assertAlmostEqual(m.busbw_at(2**20.5, t), (72.45 * 91.48) ** 0.5 * 1e9, delta=1e3)
        # clamped at the ends
        self.assertAlmostEqual(m.busbw_at(1000, t), 72.45e9, delta=1)
        self.assertAlmostEqual(m.busbw_at(64 * MIB, t), 139.97e9, delta=1)
        # the published curves rise with the payload
        for tab in (m.ONE_NODE_H200, m.FOUR_NODES_IB):
            self.assertEqual([b for b, _ in tab], sorted(b for b, _ in tab))
            self.assertEqual([v for _, v in tab], sorted(v for _, v in tab))

    def test_buckets(self):
        self.assertEqual(m.buckets(60 * MIB, 25 * MIB), [25 * MIB, 25 * MIB, 10 * MIB])
        self.assertEqual(m.buckets(50 * MIB, 25 * MIB), [25 * MIB, 25 * MIB])
        self.assertEqual(m.buckets(1000, 25 * MIB), [1000])
        self.assertAlmostEqual(m.ideal_hidden_frac(60 * MIB, 25 * MIB), 2 / 3)
        self.assertEqual(m.ideal_hidden_frac(1000, 25 * MIB), 0.0)

    def test_stoke_bucket(self):
        # a quarter of the gradients, within [256 KiB, 25 MiB] (src/train/dist.c)
        self.assertEqual(m.stoke_bucket(1686568), 421642)
        self.assertEqual(m.stoke_bucket(100000), 256 * 1024)
        self.assertEqual(m.stoke_bucket(10**9), 25 * MIB)
        self.assertEqual(m.buckets(1686568, m.stoke_bucket(1686568)), [421642] * 4)

    def test_stoke_buckets_row(self):
        # the CNN in stoke's 4 buckets of 421,642 B on 2 GPUs: 4 x S/busbw(S), 3/4 of it
        # hidden (backward's 0.488 ms is far longer)
        grad = 421642 * 4
        rows, compute, backward, _, h = m.table(dict(m.DEFAULT), m.stoke_bucket(grad), 4,
                                                None, 8)
        self.assertEqual(h, 0.75)
        ar = 4 * 421642 / m.busbw_at(421642, m.ONE_NODE_H200)
        self.assertAlmostEqual(rows[1]["allreduce"], ar, places=12)
        self.assertAlmostEqual(rows[1]["hidden"], 0.75 * ar, places=12)
        self.assertAlmostEqual(rows[1]["step"], compute + 0.25 * ar, places=12)

    def test_allreduce_time(self):
        # 60 MiB in 25+25+10 over 8 ranks at a flat 100 GB/s: 1.75 x 60 MiB / 100 GB/s
        t = m.allreduce_time(60 * MIB, 25 * MIB, 8, lambda b: 100e9)
        self.assertAlmostEqual(t, 1.75 * 60 * MIB / 100e9, places=12)
        # each bucket at its own payload's bandwidth: 25 MiB at 200, 10 MiB at 50 GB/s
        t = m.allreduce_time(35 * MIB, 25 * MIB, 2, lambda b: 200e9 if b > 20 * MIB else 50e9)
        self.assertAlmostEqual(t, 25 * MIB / 200e9 + 10 * MIB / 50e9, places=12)

    def test_step_time(self):
        # 1 ms compute, 0.3 ms all-reduce, 2/3 hidden: 1.1 ms
        step, hidden = m.step_time(1e-3, 0.8e-3, 0.3e-3, 2 / 3)
        self.assertAlmostEqual(hidden, 0.2e-3, places=12)
        self.assertAlmostEqual(step, 1.1e-3, places=12)
        # the hidden part is capped at backward's 0.1 ms
        step, hidden = m.step_time(1e-3, 0.1e-3, 0.3e-3, 2 / 3)
        self.assertAlmostEqual(hidden, 0.1e-3, places=12)
        self.assertAlmostEqual(step, 1.2e-3, places=12)

    def test_default_row(self):
        # docs/gpu.md's CNN: 128 / 199,378 s = 0.642 ms; 421,642 x 4 B in one bucket, so
        # nothing hidden; 2 GPUs: 1,686,568 B at the curve's value between 1 and 2 MiB
        rows, compute, _, grad, h = m.table(dict(m.DEFAULT), 25 * MIB, 4, None, 8)
        self.assertAlmostEqual(compute, 128 / 199378.0, places=12)
        self.assertEqual(grad, 1686568)
        self.assertEqual(h, 0.0)
        two = rows[1]
        self.assertEqual(two["ranks"], 2)
        bw = m.busbw_at(1686568, m.ONE_NODE_H200)
        self.assertTrue(72.45e9 < bw < 91.48e9)
        self.assertAlmostEqual(two["allreduce"], 1686568 / bw, places=12)
        self.assertAlmostEqual(two["step"], compute + 1686568 / bw, places=12)
        self.assertAlmostEqual(two["speedup"], 2 * compute / two["step"], places=9)
        self.assertEqual(rows[0]["speedup"], 1.0)
        # two nodes: the lower of the two curves
        last = rows[-1]
        self.assertEqual(last["ranks"], 16)
        self.assertAlmostEqual(last["busbw"], m.busbw_at(1686568, m.FOUR_NODES_IB), delta=1)


class Inputs(unittest.TestCase):
    def log(self, records):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_read_log(self):
        p = self.log([{"type": "start", "batch": 64, "accumulate": 2, "parameters": 1000,
                       "model": "mlp", "precision": "fp32", "device": "cpu"},
                      {"type": "step", "samples_per_s": 10.0, "backward_pct": 10.0},
                      {"type": "epoch", "epoch": 0, "samples_per_s": 500.0, "backward_pct": 40.0}])
        inp = m.read_log(p)
        self.assertEqual(inp["batch"], 128)
        self.assertEqual(inp["params"], 1000)
        self.assertEqual(inp["samples_per_s"], 500.0)
        self.assertAlmostEqual(inp["backward_frac"], 0.4)

    def test_refusals(self):
        many = self.log([{"type": "start", "batch": 8, "parameters": 10, "world_size": 2},
                         {"type": "epoch", "samples_per_s": 5.0}])
        with self.assertRaises(SystemExit) as e:
            m.read_log(many)
        self.assertIn("2 ranks", str(e.exception))
        empty = self.log([{"type": "start", "batch": 8, "parameters": 10}])
        with self.assertRaises(SystemExit) as e:
            m.read_log(empty)
        self.assertIn("epoch or step record", str(e.exception))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            m.main(["--hidden-frac", "1.5"])
        self.assertIn("--hidden-frac", err.getvalue())

    def test_output_labelled(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(m.main([]), 0)
        text = out.getvalue()
        self.assertTrue(text.startswith("MODEL, NOT MEASURED"))
        self.assertIn("| MODEL: configuration", text)
        self.assertIn("docs/gpu.md", text)


if __name__ == "__main__":
    unittest.main()
