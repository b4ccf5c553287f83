"""A group renamed in fleet.yaml (same scaling group, new name) keeps its demand history, forecasts, capacity
memory and learned forecast state: the store's rules (``fleet.service.renames``), the migration that adds
the names' scaling groups, and the service taking the rows over at its first tick."""

from __future__ import annotations

import logging
import textwrap
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service import capacity_store as cs
from fleet.service.app import build_service
from fleet.service.demand import DemandLog, DemandReading, minute_of
from fleet.service.renames import Identity, adopt, record_identity
from fleet.service.store import Store, demand_samples, forecasts, instance_lists, make_engine, open_store
from fleet.testing import mock_aliyun
from policies.capacity import CapacityMemory
from policies.model import ForecastState, GroupHistory, History

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
ASG = Identity("asg-chat", "", "cn-chengdu")
REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value"}
FAST = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)


@pytest.fixture
def store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield store
    store.close()


@pytest.fixture
def any_store(database_url):
    """The store on each database the suite runs (SQLite, and PostgreSQL where it answers)."""
    store = open_store(database_url)
    yield store
    store.close()


def _rows(store: Store, group: str) -> int:
    return len(DemandLog(store, {}).rows(group, T0 - timedelta(days=30)))


def _seed(store: Store, group: str, identity: Identity = ASG, minutes: int = 3) -> None:
    """``group`` seen as ``identity``, with demand minutes, a forecast and capacity memory."""
    DemandLog(store, {}).write(group, [DemandReading(T0 - timedelta(minutes=m), 2.0) for m in range(minutes)])
    with store.begin() as conn:
        record_identity(store, group, identity, T0, conn)
        row = {"service": store.service, "group_name": group, "made_at": T0, "at": T0, "forecast_rps": 3}
        conn.execute(sa.insert(forecasts).values(**row))
    cs.save_memory(store, group, CapacityMemory(rung=1), T0)


def _adopt(store: Store, group: str, configured: set[str], identity: Identity = ASG):
    with store.begin() as conn:
        return adopt(
            store, group, identity, configured, conn, history_key=lambda _n: store.service, now=T0, epoch=1
        )


def test_a_renamed_group_takes_over_the_demand_forecasts_and_capacity_memory_of_its_former_name(any_store):
    _seed(any_store, "chat")
    done = _adopt(any_store, "chat-v2", {"chat-v2"})
    assert done is not None and done.former == "chat"
    assert done.rows == {"demand_samples": 3, "forecasts": 1, "capacity_memory": 1}
    assert _rows(any_store, "chat-v2") == 3 and _rows(any_store, "chat") == 0
    assert cs.load_memory(any_store, "chat-v2").rung == 1
    assert cs.load_memory(any_store, "chat") == CapacityMemory()
    assert "adopted 3 demand minutes, 1 forecasts, its capacity memory of chat" in done.describe()


def test_nothing_is_merged_into_a_group_that_has_rows_of_its_own(any_store):
    _seed(any_store, "chat")
    DemandLog(any_store, {}).write("chat-v2", [DemandReading(T0, 1.0)])
    assert _adopt(any_store, "chat-v2", {"chat-v2"}) is None
    assert _rows(any_store, "chat") == 3 and _rows(any_store, "chat-v2") == 1


def test_a_former_name_still_configured_keeps_its_rows(any_store):
    _seed(any_store, "chat")
    assert _adopt(any_store, "chat-v2", {"chat", "chat-v2"}) is None
    assert _rows(any_store, "chat") == 3 and _rows(any_store, "chat-v2") == 0


def test_a_name_of_another_scaling_group_account_or_region_is_not_taken_over(store):
    _seed(store, "other-id", Identity("asg-other", "", "cn-chengdu"))
    _seed(store, "other-region", Identity("asg-chat", "", "cn-beijing"))
    _seed(store, "other-account", Identity("asg-chat", "prod", "cn-chengdu"))
    assert _adopt(store, "chat-v2", {"chat-v2"}) is None
    assert _rows(store, "chat-v2") == 0


def test_two_former_names_of_one_scaling_group_with_rows_are_left_alone(store):
    # which one was meant cannot be told: neither is taken
    _seed(store, "chat")
    _seed(store, "chat-old")
    assert _adopt(store, "chat-v2", {"chat-v2"}) is None
    assert _rows(store, "chat") == 3 and _rows(store, "chat-old") == 3


def test_the_learned_forecast_state_moves_and_the_former_names_is_reset(store):
    _seed(store, "chat")
    learned = ForecastState(correction=0.8, ratios=[1.1, 0.9])
    held = GroupHistory(forecast=learned, last_target=4)
    store.save_history(History(groups={"chat": held}).model_dump(mode="json"), T0, 1)
    done = _adopt(store, "chat-v2", {"chat-v2"})
    assert done is not None and done.learned
    saved = History.model_validate(store.load_history())
    assert saved.groups["chat-v2"].forecast == learned
    assert saved.groups["chat"].forecast == ForecastState()
    assert saved.groups["chat"].last_target == 4  # the rest stays (incidents go by their instances)


def test_the_learned_state_of_a_former_name_in_another_shard_is_copied_and_left_to_its_leader(store):
    # another shard's history is written by that shard's leader only: copied from, never rewritten
    _seed(store, "chat")
    learned = ForecastState(correction=0.8)
    old = History(groups={"chat": GroupHistory(forecast=learned)}).model_dump(mode="json")
    store.save_history(old, T0, 1, key="fleet#shard-a")
    with store.begin() as conn:
        keys = {"chat": "fleet#shard-a", "chat-v2": "fleet#shard-b"}
        done = adopt(store, "chat-v2", ASG, {"chat-v2"}, conn, history_key=keys.get, now=T0, epoch=2)
    assert done is not None and done.learned
    assert History.model_validate(store.load_history("fleet#shard-b")).groups["chat-v2"].forecast == learned
    assert store.load_history("fleet#shard-a") == old


def test_a_renamed_group_with_learned_state_of_its_own_keeps_it(store):
    _seed(store, "chat")
    own = GroupHistory(forecast=ForecastState(correction=1.2))
    groups = {"chat": GroupHistory(forecast=ForecastState(correction=0.8)), "chat-v2": own}
    store.save_history(History(groups=groups).model_dump(mode="json"), T0, 1)
    done = _adopt(store, "chat-v2", {"chat-v2"})
    assert done is not None and not done.learned  # the rows move; the learned state is not merged
    saved = History.model_validate(store.load_history())
    assert saved.groups["chat-v2"] == own and saved.groups["chat"].forecast.correction == 0.8


def test_a_store_at_the_previous_revision_migrates_with_its_rows_and_then_follows_a_rename(database_url):
    engine = _at_0006(database_url)
    with engine.begin() as conn:
        assert "group_identities" not in sa.inspect(conn).get_table_names()
        conn.execute(
            sa.text(
                "INSERT INTO demand_samples (service, group_name, at, request_rate_rps) "
                "VALUES ('fleet', 'chat', :at, 2.0)"
            ),
            {"at": T0.replace(tzinfo=None)},
        )
    engine.dispose()
    store = open_store(database_url)
    try:
        with store.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == (
                "0007_group_identities"
            )
        assert _rows(store, "chat") == 1
        # a name seen before the upgrade is recorded once the service observes it again, then followed
        with store.begin() as conn:
            record_identity(store, "chat", ASG, T0, conn)
        assert _adopt(store, "chat-v2", {"chat-v2"}) is not None
        assert _rows(store, "chat-v2") == 1
    finally:
        store.close()


# -- the service: the first tick after a restart (or a SIGHUP reload) on the renamed fleet.yaml ------------


def _service(tmp_path, cloud, gid, name, warm_floor: int = 2):
    text = textwrap.dedent(f"""
        region: {REGION}
        account_id: "1234567890"
        groups:
          - name: {name}
            scaling_group_id: {gid}
            min_size: 1
            max_size: 10
            warm_floor: {warm_floor}
            predictive: {{mode: forecast-only, capacity_rps: 1.0, history: 1d}}
    """)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    return build_service(load_config(path, env={}), clients, database_url=url, clock=cloud.now)


def test_the_service_renamed_in_fleet_yaml_resumes_from_its_former_names_history(tmp_path, caplog):
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        svc = _service(tmp_path, cloud, gid, "chat")
        try:
            assert svc.tick(cloud.now()).ok  # observed as "chat": its scaling group is recorded
            now = minute_of(cloud.now())
            # within the group's retention (1 day of history and a day), and one past it
            ages = [timedelta(hours=30), timedelta(hours=2), timedelta(minutes=5)]
            DemandLog(svc.store, {}).write("chat", [DemandReading(now - age, 2.0) for age in ages])
            DemandLog(svc.store, {}).write("chat", [DemandReading(now - timedelta(days=3), 2.0)])
            cs.save_memory(svc.store, "chat", CapacityMemory(rung=1), now)
            saved = History.model_validate(svc.store.load_history())
            learned = saved.groups["chat"].forecast.model_copy(update={"correction": 0.8})
            saved.groups["chat"].forecast = learned
            svc.store.save_history(saved.model_dump(mode="json"), now, None)
        finally:
            svc.close()
        cloud.advance(60)
        svc = _service(tmp_path, cloud, gid, "chat-v2")
        try:
            with caplog.at_level(logging.INFO, logger="fleet.service"):
                assert svc.tick(cloud.now()).ok
            log = DemandLog(svc.store, {})
            moved = sorted(now - r.at for r in log.rows("chat-v2", now - timedelta(days=30)))
            # taken over before the prune: the rows within the renamed group's retention stay, under it
            assert moved == sorted(ages)
            assert log.rows("chat", now - timedelta(days=30)) == []
            assert cs.load_memory(svc.store, "chat-v2").rung == 1
            history = History.model_validate(svc.store.load_history())
            assert history.groups["chat-v2"].forecast.correction == 0.8
            said = [r.getMessage() for r in caplog.records if "adopted" in r.getMessage()]
            assert said == [
                f"group chat-v2: adopted 4 demand minutes, 0 forecasts, its capacity memory, its forecast "
                f"state and launch times of chat, the former name of scaling group {gid} (renamed in "
                "fleet.yaml)"
            ]
            cloud.advance(15)
            assert svc.tick(cloud.now()).ok
            assert len([r for r in caplog.records if "adopted" in r.getMessage()]) == 1  # once
        finally:
            svc.close()


# -- an operator's pause follows the rename -------------------------------------------------------------


def test_a_paused_groups_pause_moves_with_its_rename(store):
    with store.begin() as conn:
        record_identity(store, "chat", ASG, T0, conn)
    store.set_paused("chat", True, "alice", T0, reason="investigating")
    done = _adopt(store, "chat-v2", {"chat-v2"})
    assert done is not None and done.rows["group_controls"] == 1
    assert store.paused_groups() == {"chat-v2"}
    assert "its pause" in done.describe()


def test_a_pause_of_the_new_name_is_its_own_and_its_history_is_taken_over_all_the_same(store):
    _seed(store, "chat")
    store.set_paused("chat", False, "alice", T0)
    store.set_paused("chat-v2", True, "bob", T0)
    done = _adopt(store, "chat-v2", {"chat-v2"})
    assert done is not None and "group_controls" not in done.rows  # the history moves, not the control
    assert store.paused_groups() == {"chat-v2"}
    assert _rows(store, "chat-v2") == 3


def test_a_group_paused_then_renamed_stays_paused_from_the_first_tick(tmp_path):
    """Before, the pause stayed under the former name: the renamed group was written to at once."""
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        svc = _service(tmp_path, cloud, gid, "chat", warm_floor=2)
        try:
            assert svc.tick(cloud.now()).ok  # observed as "chat": its scaling group is recorded
            svc.store.set_paused("chat", True, "alice", cloud.now(), reason="investigating")
        finally:
            svc.close()
        cloud.advance(60)
        svc = _service(tmp_path, cloud, gid, "chat-v2", warm_floor=5)  # a write were it not paused
        try:
            calls = len(list(cloud.calls))
            assert svc.tick(cloud.now()).ok
            assert svc.store.paused_groups() == {"chat-v2"}
            writes = [a for _, a in list(cloud.calls)[calls:] if not a.startswith("Describe")]
            assert "ScaleWithAdjustment" not in writes and "ModifyScalingGroup" not in writes
            [group] = svc.status()["groups"]
            assert group["paused"] is True
        finally:
            svc.close()


# -- a rename made with the upgrade to 0007: the former name was never recorded ---------------------------


def _at_0006(database_url):
    from alembic import command
    from alembic.config import Config

    from fleet.service.store import MIGRATIONS_DIR, _migration_transaction

    engine = make_engine(database_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with _migration_transaction(engine) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0006_request_group")
    return engine


def _listed(conn, group: str, *group_ids: str) -> None:
    """The instance list a 0006 service kept for ``group``: each instance names its scaling group."""
    body = [
        {"instance_id": f"i-{n}", "group_id": gid, "lifecycle_state": "InService"}
        for n, gid in enumerate(group_ids)
    ]
    conn.execute(sa.insert(instance_lists).values(service="fleet", group_name=group, read_at=T0, body=body))


def _demand(conn, group: str) -> None:
    conn.execute(
        sa.insert(demand_samples).values(service="fleet", group_name=group, at=T0, request_rate_rps=2.0)
    )


def test_a_rename_made_with_the_upgrade_is_followed_by_the_instance_list_kept_before_it(database_url):
    """The former name was last observed before 0007 recorded names: its stored instance list (0005) names
    its scaling group. Before, such a rename was not followed."""
    engine = _at_0006(database_url)
    with engine.begin() as conn:
        _demand(conn, "chat")
        _listed(conn, "chat", "asg-chat", "asg-chat")
    engine.dispose()
    store = open_store(database_url)
    try:
        done = _adopt(store, "chat-v2", {"chat-v2"})
        assert done is not None and done.former == "chat"
        assert _rows(store, "chat-v2") == 1 and _rows(store, "chat") == 0
    finally:
        store.close()


def test_an_unrecorded_name_is_not_followed_where_a_recorded_one_is_or_two_could_be_meant(store):
    with store.begin() as conn:
        _demand(conn, "chat-old")
        _listed(conn, "chat-old", "asg-chat")
    _seed(store, "chat")  # recorded as the same scaling group: it is the former name
    assert _adopt(store, "chat-v2", {"chat-v2"}).former == "chat"
    assert _rows(store, "chat-old") == 1
    with store.begin() as conn:
        _demand(conn, "chat-older")
        _listed(conn, "chat-older", "asg-chat")
    assert _adopt(store, "chat-v3", {"chat-v3"}) is None  # chat-old or chat-older: not told
