#!/usr/bin/env python3
"""The schema's version discipline and the generator's reach.

Usage: test_schema.py [unittest names…]   e.g. TestVersion
"""
import importlib.util
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen", ROOT / "protocol" / "gen.py")
gen = importlib.util.module_from_spec(_spec)
sys.modules["gen"] = gen
_spec.loader.exec_module(gen)


def variant(data, section, name):
    return next(v for v in data[section]["variant"] if v["name"] == name)


class TestVersion(unittest.TestCase):
    """The fingerprint recorded for the current version must be the schema's."""

    def setUp(self):
        self.data = gen.load()

    def test_schema_matches_its_version(self):
        self.assertEqual(gen.version_problems(self.data), [])

    def test_changed_schema_without_bump_fails(self):
        variant(self.data, "events", "RequestCancelled")["fields"].append({"name": "reason", "type": "Msg?"})
        problems = gen.version_problems(self.data)
        self.assertEqual(len(problems), 1)
        self.assertIn(f"needs protocol.version {self.data['protocol']['version'] + 1}", problems[0])

    def test_bump_with_entry_passes(self):
        variant(self.data, "events", "RequestCancelled")["fields"].append({"name": "reason", "type": "Msg?"})
        bumped = self.data["protocol"]["version"] + 1
        self.data["protocol"]["version"] = bumped
        self.data["changelog"].append(
            {"version": bumped, "fingerprint": gen.fingerprint(self.data), "change": "x", "breaks": "y"}
        )
        self.assertEqual(gen.version_problems(self.data), [])

    def test_gap_in_versions_fails(self):
        self.data["changelog"][0]["version"] = 0
        self.assertTrue(any("must be 1, 2" in p for p in gen.version_problems(self.data)))

    def test_docs_do_not_change_the_fingerprint(self):
        before = gen.fingerprint(self.data)
        self.data["struct"][0]["doc"] = "reworded"
        self.assertEqual(gen.fingerprint(self.data), before)

    def test_field_order_changes_the_fingerprint(self):
        before = gen.fingerprint(self.data)
        fields = self.data["struct"][0]["fields"]
        fields[0], fields[1] = fields[1], fields[0]
        self.assertNotEqual(gen.fingerprint(self.data), before)


class TestGenerator(unittest.TestCase):
    """One schema edit reaches the C header, the TypeScript types and the reference."""

    def test_field_added_to_event_reaches_every_output(self):
        data = gen.load()
        before = gen.generate(gen.build(data))
        variant(data, "events", "RequestCancelled")["fields"].append(
            {"name": "cancelled_by", "type": "str?", "doc": "who"}
        )
        after = gen.generate(gen.build(data))
        self.assertIn("char *cancelled_by;", after["sl_proto.h"])
        self.assertIn("cancelled_by?: string;", after["protocol.ts"])
        self.assertIn("`cancelled_by`", after["PROTOCOL.md"])
        for name in ("sl_proto.h", "sl_proto.c", "protocol.ts", "PROTOCOL.md"):
            self.assertNotEqual(before[name], after[name], name)
            self.assertNotIn("cancelled_by", before[name], name)

    def test_unknown_type_is_refused(self):
        data = gen.load()
        data["struct"][0]["fields"].append({"name": "x", "type": "Nope"})
        with self.assertRaises(gen.SchemaError):
            gen.build(data)

    def test_type_containing_itself_is_refused(self):
        data = gen.load()
        usage = next(s for s in data["struct"] if s["name"] == "InFlight")
        usage["fields"].append({"name": "again", "type": "[InFlight]"})
        with self.assertRaises(gen.SchemaError):
            gen.build(data)

    def test_every_event_and_message_has_a_sample(self):
        schema = gen.build(gen.load())
        samples = gen.c_samples(schema)
        for ev in schema.event.variants:
            self.assertIn(f'"event.{ev.kind}.full"', samples)
            self.assertIn(f'"event.{ev.kind}.min"', samples)
        for msg in schema.message.variants:
            self.assertIn(f'"{msg.kind}.', samples)


if __name__ == "__main__":
    unittest.main(verbosity=2)
