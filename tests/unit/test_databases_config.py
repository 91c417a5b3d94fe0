"""RELAY_DATABASES: name=URL pairs parsed, checked, refused naming the variable, not a secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import Settings
from relay.config.database_list import forget_files
from relay.config.databases import (
    DEFAULT_NAME,
    Database,
    configured,
    each,
    names,
    parse,
    pick,
    several_databases,
)
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import ConfigError

SECRET = "hunter2-s3cr3t"
PG = f"postgresql+psycopg://relay:{SECRET}@db1/orders"
MY = f"mysql+pymysql://relay:{SECRET}@db2/billing"


def test_pairs_parse_in_order() -> None:
    """Entries come back in the order given, names and URLs intact (spaces around ignored)."""
    found = parse(f" orders = {PG} ,\n billing={MY}")
    assert found == (Database("orders", PG), Database("billing", MY))


def test_a_comma_inside_a_url_does_not_split_it() -> None:
    """A comma in a URL's query is part of the URL: only ``,name=scheme://`` starts an entry."""
    url = "postgresql+psycopg://h/db?options=-c%20a=1,b"
    assert parse(f"orders={url},billing={MY}") == (Database("orders", url), Database("billing", MY))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (f"orders={PG},orders={MY}", "named twice"),
        (f"orders={PG},billing={PG}", "names the URL of 'orders' again"),
        (f"Orders={PG}", "bad name"),
        (f"1st={PG}", "bad name"),
        (f"or ders={PG}", "bad name"),
        (f"{'x' * 41}={PG}", "bad name"),
        (PG, "not a name=URL pair"),
        (f"orders={PG},billing=", "not a name=URL pair"),
        ("orders=relay.sqlite3", "is not a URL"),
    ],
)
def test_bad_values_are_refused_naming_the_variable(raw: str, problem: str) -> None:
    """Each malformed RELAY_DATABASES is refused at start-up, naming it, without the password."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"RELAY_DATABASES": raw})
    message = str(caught.value)
    assert message.startswith("RELAY_DATABASES")
    assert problem in message
    assert SECRET not in message


def test_a_different_database_url_beside_it_is_refused() -> None:
    """RELAY_DATABASE_URL naming none of RELAY_DATABASES' databases is ambiguous: refused."""
    other = f"postgresql://relay:{SECRET}@elsewhere/x"
    with pytest.raises(ConfigError, match="RELAY_DATABASES and RELAY_DATABASE_URL") as caught:
        Settings.from_env({"RELAY_DATABASES": f"orders={PG}", "RELAY_DATABASE_URL": other})
    assert SECRET not in str(caught.value)


def test_the_same_database_url_beside_it_is_allowed() -> None:
    """A shared env file naming the app's own database in both is not a clash."""
    s = Settings.from_env(
        {"RELAY_DATABASES": f"orders={PG},billing={MY}", "RELAY_DATABASE_URL": PG}
    )
    assert names(s) == ("orders", "billing")


def test_database_only_commands_read_it() -> None:
    """The row commands (uses=DATABASE_ONLY) see RELAY_DATABASES, so --source can pick."""
    s = Settings.from_env({"RELAY_DATABASES": f"orders={PG}"}, only=DATABASE_ONLY)
    assert names(s) == ("orders",)


def test_one_database_url_is_one_database_named_default() -> None:
    """Without RELAY_DATABASES nothing changes: the one database, named "default"."""
    s = Settings.from_env({"RELAY_DATABASE_URL": PG})
    assert each(s) == ((DEFAULT_NAME, s),)
    assert not several_databases(s)
    assert pick(s, None) == (DEFAULT_NAME, s)


def test_each_database_gets_its_own_url_source_and_derived_tick() -> None:
    """Per-database settings: own URL, RELAY_SOURCE + /name, the tick derived from its kind."""
    env = {
        "RELAY_DATABASES": f"orders={PG},billing={MY}",
        "RELAY_SOURCE": "/shop",
        "RELAY_BATCH_SIZE": "50",
    }
    views = dict(each(Settings.from_env(env)))
    assert views["orders"].database_url == PG
    assert views["billing"].database_url == MY
    assert views["orders"].source == "/shop/orders"
    assert views["billing"].source == "/shop/billing"
    assert views["orders"].batch_size == views["billing"].batch_size == 50
    assert views["orders"].notified
    assert not views["billing"].notified
    assert views["orders"].tick_seconds == 1.0
    assert views["billing"].tick_seconds == 0.4


def test_an_unset_source_is_derived_per_database() -> None:
    """Without RELAY_SOURCE each database's source is derived from its own URL (store default)."""
    views = dict(each(Settings.from_env({"RELAY_DATABASES": f"orders={PG},billing={MY}"})))
    assert views["orders"].source is None
    assert views["billing"].source is None


def test_pick_refuses_ambiguity_and_unknown_names() -> None:
    """Several databases and no --source: refused naming the choices; an unknown name too."""
    s = Settings.from_env({"RELAY_DATABASES": f"orders={PG},billing={MY}"})
    with pytest.raises(ConfigError, match=r"2 databases \(orders, billing\).*--source NAME"):
        pick(s, None)
    with pytest.raises(ConfigError, match="'shipping' is not a configured database"):
        pick(s, "shipping")
    assert pick(s, "billing")[1].database_url == MY


def test_describe_redacts_every_url() -> None:
    """The settings as logged carry no password of any database."""
    s = Settings.from_env({"RELAY_DATABASES": f"orders={PG},billing={MY}"})
    assert SECRET not in str(s.describe())
    assert SECRET not in repr(parse(s.databases or ""))


def test_fifty_databases_parse() -> None:
    """A long list parses, in order, every name kept."""
    raw = ",".join(f"db{i}=sqlite:///{i}.db" for i in range(50))
    assert names(Settings.from_env({"RELAY_DATABASES": raw})) == tuple(f"db{i}" for i in range(50))


def test_a_databases_file_is_read_once_until_forgotten(tmp_path: Path) -> None:
    """RELAY_DATABASES=@PATH: one name=URL a line, blank lines and whole-line comments
    skipped (a '#' inside a URL's password is kept); read again only after forget_files; a
    file that cannot be read is refused naming the variable and the path."""
    listing = tmp_path / "databases"
    listing.write_text("# tenants\norders=postgresql://u:p#1@h/o\n\n  billing=sqlite:///b.db\n")
    settings = Settings(databases=f"@{listing}")
    assert [(d.name, d.url) for d in configured(settings)] == [
        ("orders", "postgresql://u:p#1@h/o"),
        ("billing", "sqlite:///b.db"),
    ]
    listing.write_text("orders=postgresql://u:p#1@h/o\n")
    assert len(configured(settings)) == 2  # not read again yet
    forget_files()
    assert [d.name for d in configured(settings)] == ["orders"]
    with pytest.raises(ConfigError, match=r"RELAY_DATABASES=@.*nowhere: cannot read the file"):
        Settings(databases=f"@{tmp_path / 'nowhere'}")
    listing.write_text("# nothing but a comment\n")
    forget_files()
    with pytest.raises(ConfigError, match=r"RELAY_DATABASES.*names no database"):
        Settings(databases=f"@{listing}")


def test_a_database_file_counts_as_changed_once_written_again(tmp_path: Path) -> None:
    """``changed`` is False for an inline list, a file not read yet, or one unchanged since it
    was read; True once it is written again or removed; reading it again resets it."""
    from relay.config import database_list

    listing = tmp_path / "databases"
    listing.write_text("a=postgresql+psycopg://h/a\n")
    raw = f"@{listing}"
    database_list.forget_files()
    assert not database_list.changed("a=postgresql+psycopg://h/a")
    assert not database_list.changed(raw)  # not read yet
    assert [d.name for d in database_list.parse(raw)] == ["a"]
    assert not database_list.changed(raw)
    listing.write_text("a=postgresql+psycopg://h/a\nb=postgresql+psycopg://h/b\n")
    assert database_list.changed(raw)
    database_list.forget_files()
    assert [d.name for d in database_list.parse(raw)] == ["a", "b"]
    assert not database_list.changed(raw)
    listing.unlink()
    assert database_list.changed(raw)
    database_list.forget_files()
