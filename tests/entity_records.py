"""Three datasets of entity records changed at random, one delivery at a time: the
inputs of the change-following merge's property test
(tests/functional/test_entity_merge_following.py) and of the soak (bench/soak.py).
a has email and score, b email, f2 and tags, c f3 (its lower() equals b's f2) and
score; a and c flag a record deleted with gone."""

from __future__ import annotations

import random
from collections import Counter

DATASETS = ("a", "b", "c")
EMAILS = [f"e{i}" for i in range(8)]
CODES = ["x", "y", "z", "w"]


class EntityRecords:
    """The datasets as dicts of records by _id; every draw from pick, so a seed replays
    the same deliveries. kinds counts the changes made, by kind."""

    def __init__(self, pick: random.Random, emails=EMAILS, codes=CODES) -> None:
        self.random = pick
        self.emails, self.codes = list(emails), list(codes)
        self.records: dict[str, dict[str, dict]] = {name: {} for name in DATASETS}
        self.next_id = 0
        self.kinds: Counter = Counter()

    def new_record(self, dataset: str) -> dict:
        self.next_id += 1
        record = {"_id": f"{dataset}{self.next_id}"}
        self.refill(dataset, record)
        return record

    def insert(self, dataset: str) -> dict:
        """A new record, added to dataset."""
        record = self.new_record(dataset)
        self.records[dataset][record["_id"]] = record
        return record

    def refill(self, dataset: str, record: dict) -> None:
        """New values for the record: a new email or code joins or splits entities."""
        pick = self.random
        if dataset == "a":
            record.update(email=pick.choice(self.emails + [None]), score=pick.randrange(5))
            record.setdefault("gone", False)
        elif dataset == "b":
            tags = pick.choice([None, [], ["t1"], ["t2", "t1"]])
            record.update(
                email=pick.choice(self.emails + [None]),
                f2=pick.choice(self.codes + [None]),
                tags=tags,
            )
        else:
            record.update(
                f3=pick.choice([c.upper() for c in self.codes] + [None, ""]),
                score=pick.randrange(5),
            )
            record.setdefault("gone", False)

    def random_delivery(self, least: int = 1, most: int = 5) -> None:
        """least to most changes: records inserted, changed, flagged deleted (or back)
        and hard-deleted."""
        pick = self.random
        for _ in range(pick.randrange(least, most + 1)):
            dataset = pick.choice(DATASETS)
            records = self.records[dataset]
            action = pick.choice(["insert", "insert", "update", "update", "flag", "remove"])
            if action == "insert" or not records:
                self.insert(dataset)
                self.kinds["new record"] += 1
                continue
            record = records[pick.choice(sorted(records))]
            if action == "update":
                self.refill(dataset, record)
                self.kinds["update"] += 1
            elif action == "flag" and dataset != "b":
                record["gone"] = not record["gone"]
                self.kinds["flag delete" if record["gone"] else "flag undone"] += 1
            else:
                del records[record["_id"]]
                self.kinds["hard delete"] += 1
