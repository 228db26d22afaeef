"""Write deterministic demo data for the entity merge: one customer base seen by three systems.

The script writes three seeds into ``seeds/`` (relative to the repository root):

* ``crm_customers.csv``    -- the CRM, with one or two ``;``-separated emails per row,
  mixed-case emails, phones in varied formats and a soft-delete flag;
* ``billing_accounts.csv`` -- billing accounts, lower-case email and digits-only phone;
* ``support_contacts.csv`` -- support contacts, sometimes upper-case emails, formatted phones
  and a soft-delete flag.

Records are linked when a lower-cased email or the phone digits (non-digits removed) are equal.
The data is built from "persons" so that the expected clusters are known:

* persons in two or three systems who share an email and/or a phone with each other;
* persons in only one system;
* chains, where a CRM row and a billing row share nothing directly but both match the same
  support row (CRM email = support email, support phone digits = billing phone digits);
* deleted rows whose email/phone would otherwise match a live row in another system, including
  deleted support rows that would bridge two unrelated live persons;
* a few persons with two live CRM rows (same phone, or same email when the phone is missing).

Every email and phone that is not meant to be shared is fresh and globally unique, so there are
no placeholder values and no accidental giant clusters. Rerunning gives byte-identical files.

``seeds/crm_customer_changes.csv`` (delivery 2 of the CRM: a join, a split, an update) is
written by hand against these files; files generated with other settings need its rows
picked again.

Usage: ``python scripts/make_demo_customers.py``
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20261122
SEEDS_DIR = Path(__file__).resolve().parent.parent / "seeds"

# Target sizes (rows) per file; singletons fill whatever the linked persons leave over.
CRM_ROWS = 1500
BILLING_ROWS = 1200
SUPPORT_ROWS = 1000

# Persons per scenario.
N_ALL_THREE = 250  # CRM + billing + support, every pair shares an email or a phone
N_CHAINS = 30  # CRM -(email)- support -(phone)- billing, CRM and billing share nothing
N_CRM_BILLING = 400
N_CRM_SUPPORT = 250
N_BILLING_SUPPORT = 150
N_CRM_DUPLICATES = 10  # of the all-three persons, those with a second (live) CRM row
N_DELETED_CRM_VS_BILLING = 8  # deleted CRM row matching a live billing-only person
N_DELETED_CRM_VS_SUPPORT = 6  # deleted CRM row matching a live support-only person
N_DELETED_SUPPORT_VS_CRM = 6  # deleted support row matching a live CRM-only person
N_DELETED_BRIDGES = 4  # deleted support row: email of a CRM person, phone of a billing person
N_DELETED_CRM_SINGLETONS = 16
N_DELETED_SUPPORT_SINGLETONS = 10

TWO_EMAIL_SHARE = 0.15  # CRM rows with a second address
CRM_HEADER = ["_id", "full_name", "emails", "phone", "city", "is_deleted"]
BILLING_HEADER = ["_id", "account_name", "email", "phone", "country", "plan"]
SUPPORT_HEADER = ["_id", "contact_name", "contact_email", "phone", "ticket_count", "is_deleted"]

FIRST_NAMES = [
    "Anna", "Astrid", "Ingrid", "Sigrid", "Kari", "Liv", "Solveig", "Åsa", "Maja", "Elin",
    "Freja", "Ida", "Nora", "Sofie", "Emma", "Hanne", "Marit", "Tuva", "Linnea", "Greta",
    "Lars", "Erik", "Olav", "Bjørn", "Knut", "Sven", "Magnus", "Henrik", "Anders", "Mikkel",
    "Jonas", "Emil", "Oskar", "Nils", "Øyvind", "Jörg", "Mats", "Jens", "Pekka", "Timo",
    "Aino", "Eero", "Jan", "Pieter", "Lotte", "Klaus", "Heidi", "Rasmus", "Frida", "Tobias",
]  # fmt: skip
LAST_NAMES = [
    "Berg", "Hansen", "Johansen", "Olsen", "Larsen", "Andersen", "Pedersen", "Nilsen",
    "Kristiansen", "Jensen", "Karlsson", "Lindqvist", "Nyström", "Svensson", "Eriksson",
    "Holm", "Dahl", "Lund", "Strand", "Bakke", "Haugen", "Solberg", "Møller", "Sørensen",
    "Virtanen", "Korhonen", "Mäkinen", "Nieminen", "de Vries", "Jansen", "Bakker", "Müller",
    "Schmidt", "Fischer", "Wagner", "Åberg", "Ekström", "Lindgren", "Sandberg", "Halvorsen",
]  # fmt: skip
# (city, ISO country code, calling code)
CITIES = [
    ("Oslo", "NO", "47"), ("Bergen", "NO", "47"), ("Trondheim", "NO", "47"),
    ("Stavanger", "NO", "47"), ("Tromsø", "NO", "47"), ("Stockholm", "SE", "46"),
    ("Göteborg", "SE", "46"), ("Malmö", "SE", "46"), ("Uppsala", "SE", "46"),
    ("København", "DK", "45"), ("Aarhus", "DK", "45"), ("Odense", "DK", "45"),
    ("Helsinki", "FI", "358"), ("Tampere", "FI", "358"), ("Turku", "FI", "358"),
    ("Berlin", "DE", "49"), ("Hamburg", "DE", "49"), ("Amsterdam", "NL", "31"),
    ("Utrecht", "NL", "31"), ("Reykjavík", "IS", "354"),
]  # fmt: skip
# Reserved example domains only (RFC 2606), so no address can belong to anybody.
EMAIL_DOMAINS = [
    "example.com", "example.org", "example.net", "mail.example", "post.example",
    "fjord.example", "nordic.example", "work.example",
]  # fmt: skip
ASCII_FOLD = str.maketrans(
    {"å": "a", "ä": "a", "æ": "ae", "ø": "o", "ö": "o", "ü": "u", "é": "e", "í": "i", " ": ""}
)
PLANS = ["free", "pro", "enterprise"]
PLAN_WEIGHTS = [0.5, 0.35, 0.15]


@dataclass
class Person:
    """A real-world customer; every system row is derived from one of these."""

    first: str
    last: str
    city: str
    country: str
    calling_code: str
    email: str  # primary address, lower case
    phone: str  # digits only


class Factory:
    """Draws names and globally unique emails and phones from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used_emails: set[str] = set()
        self.used_phone_cores: set[str] = set()

    def person(self) -> Person:
        city, country, code = self.rng.choice(CITIES)
        first = self.rng.choice(FIRST_NAMES)
        last = self.rng.choice(LAST_NAMES)
        p = Person(first, last, city, country, code, "", "")
        p.email = self.fresh_email(p)
        p.phone = self.fresh_phone(p)
        return p

    def fresh_email(self, p: Person) -> str:
        """A lower-case address never handed out before (compared case-insensitively)."""
        first = p.first.lower().translate(ASCII_FOLD)
        last = p.last.lower().translate(ASCII_FOLD)
        while True:
            style = self.rng.randrange(4)
            if style == 0:
                local = f"{first}.{last}"
            elif style == 1:
                local = f"{first[0]}{last}"
            elif style == 2:
                local = f"{first}.{last}{self.rng.randrange(1, 100)}"
            else:
                local = f"{first}_{last[:4]}{self.rng.randrange(1, 1000)}"
            address = f"{local}@{self.rng.choice(EMAIL_DOMAINS)}"
            if address not in self.used_emails:
                self.used_emails.add(address)
                return address

    def fresh_phone(self, p: Person) -> str:
        """Digits of a number whose last eight digits were never handed out before.

        Shapes: eight local digits (most), calling code + eight digits, or nine digits.
        """
        while True:
            core = self.rng.choice("49") + "".join(self.rng.choice("0123456789") for _ in range(7))
            if core not in self.used_phone_cores:
                self.used_phone_cores.add(core)
                break
        shape = self.rng.random()
        if shape < 0.6:
            return core
        if shape < 0.85:
            return p.calling_code + core
        return self.rng.choice("23456789") + core

    def maybe_fresh_email(self, p: Person, p_empty: float = 0.5) -> str:
        return "" if self.rng.random() < p_empty else self.fresh_email(p)

    def maybe_fresh_phone(self, p: Person, p_empty: float = 0.5) -> str:
        return "" if self.rng.random() < p_empty else self.fresh_phone(p)


def format_phone(rng: random.Random, digits: str) -> str:
    """Render phone digits in one of several human formats; only non-digits are added.

    Ten or more digits are a calling code plus eight digits, nine digits a long local number.
    """
    if not digits:
        return ""
    if len(digits) >= 10:
        code, d = digits[:-8], digits[-8:]
        return rng.choice(
            [
                f"+{code} {d[:3]} {d[3:5]} {d[5:]}",
                f"+{code}{d}",
                f"+{code} {d[:2]} {d[2:4]} {d[4:6]} {d[6:]}",
            ]
        )
    if len(digits) == 9:
        return rng.choice([f"({digits[:3]}) {digits[3:6]}-{digits[6:]}", digits])
    d = digits
    return rng.choice([f"{d[:3]}-{d[3:5]}-{d[5:]}", d, f"{d[:3]} {d[3:5]} {d[5:]}"])


def mixed_case(rng: random.Random, email: str, share: float) -> str:
    """Sometimes capitalise an address the way people type it: ``Anna.Berg@Example.com``."""
    if not email or rng.random() >= share:
        return email
    local, domain = email.split("@")
    local = ".".join(part[:1].upper() + part[1:] for part in local.split("."))
    return f"{local}@{domain[:1].upper()}{domain[1:]}"


class Builder:
    """Turns persons into rows of the three systems."""

    def __init__(self, rng: random.Random, factory: Factory) -> None:
        self.rng = rng
        self.factory = factory
        self.crm: list[dict[str, str]] = []
        self.billing: list[dict[str, str]] = []
        self.support: list[dict[str, str]] = []

    def add_crm(self, p: Person, email: str, phone: str, deleted: bool = False) -> None:
        rng = self.rng
        emails = [email] if email else []
        if emails and rng.random() < TWO_EMAIL_SHARE:
            emails.append(self.factory.fresh_email(p))
            rng.shuffle(emails)
        name = f"{p.first} {p.last}"
        if rng.random() < 0.08:
            name = f"{p.first} {rng.choice('ABCDEFGHJKLMNOPRST')}. {p.last}"
        self.crm.append(
            {
                "full_name": name,
                "emails": ";".join(mixed_case(rng, e, 0.3) for e in emails),
                "phone": format_phone(rng, phone),
                "city": p.city,
                "is_deleted": "true" if deleted else "false",
            }
        )

    def add_billing(self, p: Person, email: str, phone: str) -> None:
        rng = self.rng
        style = rng.random()
        if style < 0.6:
            name = f"{p.first} {p.last}"
        elif style < 0.85:
            name = f"{p.last}, {p.first}"
        else:
            name = f"{p.first[0]}. {p.last}"
        self.billing.append(
            {
                "account_name": name,
                "email": email.lower(),
                "phone": phone,
                "country": p.country,
                "plan": rng.choices(PLANS, PLAN_WEIGHTS)[0],
            }
        )

    def add_support(self, p: Person, email: str, phone: str, deleted: bool = False) -> None:
        rng = self.rng
        style = rng.random()
        if style < 0.7:
            name = f"{p.first} {p.last}"
        elif style < 0.8:
            name = f"{p.first} {p.last}".lower()
        elif style < 0.9:
            name = p.first
        else:
            name = f"{p.first} {p.last}".upper()
        self.support.append(
            {
                "contact_name": name,
                "contact_email": email.upper() if email and rng.random() < 0.2 else email,
                "phone": format_phone(rng, phone),
                "ticket_count": str(min(int(rng.expovariate(1 / 4)), 60)),
                "is_deleted": "true" if deleted else "false",
            }
        )

    # --- keys for linked persons -------------------------------------------------------------

    def linked_keys(self, p: Person, n: int) -> list[tuple[str, str]]:
        """(email, phone) for n rows of one person such that every pair shares email or phone.

        A key a row does not share is either empty or a fresh unique value.
        """
        rng = self.rng
        while True:
            flags = [(rng.random() < 0.8, rng.random() < 0.45) for _ in range(n)]
            if all(
                (a[0] and b[0]) or (a[1] and b[1])
                for i, a in enumerate(flags)
                for b in flags[i + 1 :]
            ):
                break
        return [
            (
                p.email if share_email else self.factory.maybe_fresh_email(p),
                p.phone if share_phone else self.factory.maybe_fresh_phone(p),
            )
            for share_email, share_phone in flags
        ]

    def lone_keys(self, p: Person) -> tuple[str, str]:
        """Keys of a person seen once: sometimes no email, sometimes no phone, rarely neither."""
        r = self.rng.random()
        email = "" if r < 0.08 or 0.97 <= r else p.email
        phone = "" if 0.08 <= r < 0.3 or 0.97 <= r else p.phone
        return email, phone


def build(rng: random.Random) -> tuple[Builder, dict[str, int]]:
    factory = Factory(rng)
    b = Builder(rng, factory)

    for i in range(N_ALL_THREE):
        p = factory.person()
        (ce, cp), (be, bp), (se, sp) = b.linked_keys(p, 3)
        b.add_crm(p, ce, cp)
        b.add_billing(p, be, bp)
        b.add_support(p, se, sp)
        if i < N_CRM_DUPLICATES:  # an older CRM row sharing the phone (or else the email)
            if cp:
                b.add_crm(p, factory.fresh_email(p), cp)
            else:
                b.add_crm(p, ce, factory.maybe_fresh_phone(p))

    for _ in range(N_CHAINS):
        p = factory.person()
        b.add_crm(p, p.email, factory.maybe_fresh_phone(p))
        b.add_support(p, p.email, p.phone)
        b.add_billing(p, factory.maybe_fresh_email(p), p.phone)

    for _ in range(N_CRM_BILLING):
        p = factory.person()
        (ce, cp), (be, bp) = b.linked_keys(p, 2)
        b.add_crm(p, ce, cp)
        b.add_billing(p, be, bp)

    for _ in range(N_CRM_SUPPORT):
        p = factory.person()
        (ce, cp), (se, sp) = b.linked_keys(p, 2)
        b.add_crm(p, ce, cp)
        b.add_support(p, se, sp)

    for _ in range(N_BILLING_SUPPORT):
        p = factory.person()
        (be, bp), (se, sp) = b.linked_keys(p, 2)
        b.add_billing(p, be, bp)
        b.add_support(p, se, sp)

    # Deleted rows that would match a live row elsewhere if deletion were ignored.
    for _ in range(N_DELETED_CRM_VS_BILLING):
        p = factory.person()
        b.add_billing(p, p.email, p.phone)
        b.add_crm(p, p.email, p.phone if rng.random() < 0.5 else "", deleted=True)
    for _ in range(N_DELETED_CRM_VS_SUPPORT):
        p = factory.person()
        b.add_support(p, p.email, p.phone)
        b.add_crm(p, "" if rng.random() < 0.5 else p.email, p.phone, deleted=True)
    for _ in range(N_DELETED_SUPPORT_VS_CRM):
        p = factory.person()
        b.add_crm(p, p.email, p.phone)
        b.add_support(p, p.email, "" if rng.random() < 0.5 else p.phone, deleted=True)
    for _ in range(N_DELETED_BRIDGES):
        x, y = factory.person(), factory.person()
        b.add_crm(x, x.email, factory.maybe_fresh_phone(x))
        b.add_billing(y, factory.maybe_fresh_email(y), y.phone)
        b.add_support(x, x.email, y.phone, deleted=True)

    # Persons seen by one system only; these fill the files up to their target sizes.
    for _ in range(N_DELETED_CRM_SINGLETONS):
        p = factory.person()
        b.add_crm(p, *b.lone_keys(p), deleted=True)
    for _ in range(N_DELETED_SUPPORT_SINGLETONS):
        p = factory.person()
        b.add_support(p, *b.lone_keys(p), deleted=True)
    while len(b.crm) < CRM_ROWS:
        p = factory.person()
        b.add_crm(p, *b.lone_keys(p))
    while len(b.billing) < BILLING_ROWS:
        p = factory.person()
        b.add_billing(p, *b.lone_keys(p))
    while len(b.support) < SUPPORT_ROWS:
        p = factory.person()
        b.add_support(p, *b.lone_keys(p))

    stats = {
        "multi_system_persons": N_ALL_THREE
        + N_CHAINS
        + N_CRM_BILLING
        + N_CRM_SUPPORT
        + N_BILLING_SUPPORT,
        "three_system_persons": N_ALL_THREE + N_CHAINS,
        "chains": N_CHAINS,
        "deleted_matches": N_DELETED_CRM_VS_BILLING
        + N_DELETED_CRM_VS_SUPPORT
        + N_DELETED_SUPPORT_VS_CRM
        + N_DELETED_BRIDGES,
    }
    return b, stats


def write_csv(
    rng: random.Random, path: Path, header: list[str], prefix: str, rows: list[dict[str, str]]
) -> None:
    """Shuffle the rows (so ids reveal nothing), number them and write them with a header."""
    rows = list(rows)
    rng.shuffle(rows)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        for n, row in enumerate(rows, start=1):
            writer.writerow({"_id": f"{prefix}-{n:05d}", **row})


def main() -> None:
    rng = random.Random(SEED)
    b, stats = build(rng)
    SEEDS_DIR.mkdir(parents=True, exist_ok=True)
    files = [
        ("crm_customers.csv", CRM_HEADER, "crm", b.crm),
        ("billing_accounts.csv", BILLING_HEADER, "bill", b.billing),
        ("support_contacts.csv", SUPPORT_HEADER, "sup", b.support),
    ]
    for name, header, prefix, rows in files:
        write_csv(rng, SEEDS_DIR / name, header, prefix, rows)
        deleted = sum(r.get("is_deleted") == "true" for r in rows)
        print(f"{name}: {len(rows)} rows ({deleted} deleted)")
    print(f"intended multi-system persons: {stats['multi_system_persons']}")
    print(f"  of which in all three systems: {stats['three_system_persons']}")
    print(f"intended chains (CRM -email- support -phone- billing): {stats['chains']}")
    print(f"deleted rows that would otherwise match a live row: {stats['deleted_matches']}")


if __name__ == "__main__":
    main()
