"""The live schema file and the migrations can never drift apart, and history never changes.

- A database migrated from zero has exactly the schema ``sql/schema.sql`` and
  ``sql/superseded.sql`` build (``sql.schema()``): every table, column, constraint, index,
  sequence and function definition compared.
- Each migration step reversed gives back exactly the schema of the step before it, and up
  again gives the live schema (so the reverse of a function change reinstalls the old body).
- Each released migration SQL file is pinned by its checksum: a released migration cannot
  change under the databases that already ran it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import conninfo
from psycopg import sql as pgsql

from django_lonnymq import sql
from tests import conftest
from tests.migrations.catalog import differences, snapshot

# sha256 of each released migration file. A new migration adds its files here when it is
# written; a released file's line never changes (write a new migration instead).
RELEASED = {
    "0001_initial.down.sql": "ad6acae980fbc0a559a4e5c4906c13fe05a870e0e4759030d830b69787347d9d",
    "0001_initial.up.sql": "b4d18455ffe842b286230e64dda549fd1acfe602c5866d6548f323479ee30294",
    "0002_task_result.down.sql": "577f2cbe854fe21ba9b76f61c84c09f74cb2764f07b132a28019e39ecf5c70ea",
    "0002_task_result.up.sql": "929d4d24a2052884d50dc819c60775d4ce08756f643649a059973e63f906c813",
    "0003_queue_sample.down.sql": "0806f9d5b6101851d3b30b8401d9a22bbb8d10631fd67985dd235e762aad64bf",
    "0003_queue_sample.up.sql": "191e58194b42877b5caec8689d6933c97f2f95bf996a7209e5b802884b582c28",
    "0004_set_based_enqueue_many.up.sql": "d2b33ee1d4e56febc8baa0949a165a47c12445899170d37b8a805e27ba4c91a6",
    "0005_single_enqueue_mark_once.up.sql": "9548d4ced8d8e2919b102347e07210f03af7bdac052be3ea816d4c8bcaf9a7d2",
    "0006_pinned_and_bounded.down.sql": "44250444f155f2a4a6ce6fc0172269851d37619c6a2e9aebe2d7f64398399ad4",
    "0006_pinned_and_bounded.up.sql": "596a4765dd67a76265b811e3e4525d843d293736377b496af3d52b118b64d5a0",
    "0007_paused_state.down.sql": "63eec3ec3ba94d1bb1125f388e99dcc0f4584effd94b742bbcda24d83c79d753",
    "0007_paused_state.up.sql": "1d502078be33f6385cc3c3c559bd9378423cb62c808720304e378b79b10bada1",
    "0008_workers.down.sql": "f8228526bddeafb78c559ca14f09e4c5dd5c7fac218e36a46d4f424eb80f2dff",
    "0008_workers.up.sql": "05ab5a9d8362462f3ec593ef67f78475485f80f6b751d9fbaa689733d1119ffc",
    "0009_topics.down.sql": "89225107f8d7282f5c5793bba838edc50bf012b7ecdb58b9f590bc8beffb710d",
    "0009_topics.up.sql": "53a931bf376292cd137ab3614edc3bae7f54067021bd3e70fc21b4b3e5ca2569",
    "0010_weights_and_token_buckets.down.sql": "3533a44878cb89c61e774a3b87506d3e78df5769826c8f18b08bd82f271fcc03",
    "0010_weights_and_token_buckets.up.sql": "0a7da712065383e9cdf7e51a02de7c6c21f79f01ddeb7474f56d16766bb0add9",
    "0011_schedule.down.sql": "9d16de22a0578f583a7211b6b3f6ee9c85adcf9f14ed8ecc16156266a5e4a7b0",
    "0011_schedule.up.sql": "8a172ee06dff1dc72a2aad838fb26afb2fd2d4cccac3f0cbb1aed7f98e5a4af7",
    "0012_worker_sampling.down.sql": "3eb7e93c53b505c0a3c0a7b90d6cea40b16a6cc2bd7d9bcbd22a0044f6a410a3",
    "0012_worker_sampling.up.sql": "0d21e254628c04643a432c46b70c0c80acfca9c43a52c94c094f716bcb1fcced",
    "0013_enqueue_task.down.sql": "2999e18b5ba7be068081d463c7167c5667d7027d57b93d922ccc0d9e37328cd2",
    "0013_enqueue_task.up.sql": "a43d9492ce8e5eb9e220057110473bb2b4d2bda4cc1505ab95830efb9321e121",
    "0014_running_control.down.sql": "623d6eb1f3436b88baf3e8ae698dd7e5d9cbafe11b04a7084542d2cf6bd2eb3e",
    "0014_running_control.up.sql": "cab6616cb50ca0a5beaece42385829ff242bec36966edb77a36abe925c792da7",
    "0015_dequeue_held_channels.down.sql": "dc6466b50c06b4fd218f0eeb40a5814b41a1bbcade44f5ef5336dc6913304679",
    "0015_dequeue_held_channels.up.sql": "c57c2560049229ef9925d086a3a353e643a5c18bee5bebd71c440141357e2650",
    "0016_trace.down.sql": "ffcffd1caf9334c00c74797351e5040a44cfec11f82e8dca7f1349e39c7ad90c",
    "0016_trace.up.sql": "591d653c815d112fee522841ba61e20167830f265fa3a8ed51726ea2d196f3de",
    "0017_schedule_hardening.down.sql": "3d3af3a14640003c63d5f21f3a9bab179872e85c337b76a601f420c982baedc5",
    "0017_schedule_hardening.up.sql": "cebb8450cec008f9c31c2ef68c39ba5b6cca9a712c642f84240c7f5aef9f2a93",
    "0018_queue_limits.down.sql": "60f3b834f636c02627ec58de0e923c01233ce9ea77d89a1aa176c962081be122",
    "0018_queue_limits.up.sql": "26b5d19181c246fcd338d972f27bac41a7e6e7e2f5ce14b3c01157f3ed52cd42",
    "0019_dequeue_single_pass.up.sql": "81166b0eaf0c4d1e9089adf9f05f8d0e3f1c98fda33c3901cf8983457aa980cd",
    "0020_generic_plans.down.sql": "9d4ca61fe7d901363dcf781edecfea8d2cac3fae4f06f3a294dd63b14851d851",
    "0020_generic_plans.up.sql": "5a3536f04849e6c7f9fd95cabdffb11e1b417f4cf9982b5f97caa59d00ca6a63",
    "0021_payload_depth.down.sql": "fadeca60de6c3f7994cc0667eae14499342df12b49cf0eb59364dafb59c01112",
    "0021_payload_depth.up.sql": "e94c9cf420d59f654adf2362261232992e32d7bd338f2be928ac1e140becf466",
    "0022_cancel_message_cap.up.sql": "d70d0d604b546f14ee7a41fb636cd78dda41d508a70b6dc509f0eed9ea6f7820",
    "0023_pause_queue.down.sql": "b84eb44dee6030d35a435b045c726cd528d84407142fcfa2ba8e2b30be989e1b",
    "0023_pause_queue.up.sql": "0912affd2d6fbd7542af3ddbeeb100348d1fb4e7d1d9997b295d56d6f4a5d5dd",
    "0024_snooze.down.sql": "d7c8cf7c7a248983991531409b961083f22c722780ec2166363bbb6d5ffcaf40",
    "0024_snooze.up.sql": "7dfd62447c60fd111f6fc88683bdfa2f86fd9db02191e1ec8181135824d27263",
    "0025_dedup_modes.down.sql": "3a0997a9c1d305b9de5a417d0c7f54289432fc7465c022f6254ce6e9b449ab05",
    "0025_dedup_modes.up.sql": "45afd7c4fbb0f4fbc158db78ec2f4f9cf00051ed0e49e75004a69b40060d5dc5",
    "0028_channel_prune.down.sql": "c49b6f8bbfbb909af8f0f0e643e7c27ecf096f254f8f403cc1dac3d10181a212",
    "0028_channel_prune.up.sql": "16136038b7dfe999ee254203c929b99213f5569e8c3bac779ac06e53e3078454",
    "0026_plans.down.sql": "c511d1e6d70ef29c8c58e6d6dd71e7731a93b4134b616520e1d45d48d19bdd8e",
    "0026_plans.up.sql": "ee66f707d629f2da686d4bc754270da214034956e86dc6a30bd263b7b4e08de3",
    "0027_workflows.down.sql": "6671cc625f6e7f52d4755a37f31e3194d756fd6f8b68af536f7e4a5eabed0863",
    "0027_workflows.up.sql": "733517507bfd37248e5eec552fbc7236c1029131338f114dd186d602b6a4a9e8",
    "0029_admin_indexes.down.sql": "0e48d0c8803ee673c6de2c54ead816b6c5e5e1b0f77354b2f02b1300e746d25e",
    "0029_admin_indexes.up.sql": "cd3fa34d3b2b5fa631026ef63af681f0f5535c781846b65d47809283b895203e",
    "0030_check_v2.down.sql": "1cd847ad51612ceeb8c3c88abde50eadcb959700d2c70a2fc53fbe780a9479b3",
    "0030_check_v2.up.sql": "0e8bf4eca18f3a69e2faa5d76476368a652eb256c16f0fe079538f2d57e477ae",
    "0031_task_dedup.down.sql": "1fc82d1badd548a36497ea0d74bac03c05578a9a9be653374b85a67fded6e13e",
    "0031_task_dedup.up.sql": "c3739b617cb5ca89b0b44f1e68c4912483064c9b5829d428a300f39aa5ed31e0",
    "0032_workflow_ack_v2.down.sql": "0b5660813599c35bdc2e4bad2e65df301e047e4a7c95cccb73974024940def92",
    "0032_workflow_ack_v2.up.sql": "23589a9d2a1a6a8317b512705fc7867ea38a491a95f159ffdd5c5cfb2680fb99",
    "0033_apply_marks_in_steps.down.sql": "71d73b7ad52d264d8a5ff288339753cb0337349370130f4898a02bfdd8f0052e",
    "0033_apply_marks_in_steps.up.sql": "52d567327f71f950f4cbabafad8c0739e1d08e229d1333043268811d2aa03c12",
    "0034_workflow_step_arrays.up.sql": "4d29efa0aee2bde62f103e8a7f7b34428ca48f3f27d985f2cd37418c22e1cc3b",
    "0034_workflow_step_arrays.down.sql": "b531092034e602384fb238e368ae28ce0c3c9e1ca866d7e95e4939401bb4bdf8",
    "0035_stats_at_size.down.sql": "39316e0c322b53ad9edcbc753092e006c33534ae10daa5af1d9498c5d93e062a",
    "0035_stats_at_size.up.sql": "79a372c258078d13eacd55b61a27e41aa89eb605b00349fb722d204abaf9a2e6",
    "0036_channel_without_fk.down.sql": "057d44b640037f3adbb088caa0317f596ff8ac09aae8ac7934afac714c4037bb",
    "0036_channel_without_fk.up.sql": "7676773deb6a2015c27c0f177e0c287d7c9a3eeb8fa78c16801c86cbb3676419",
    "0037_workflow_lean.down.sql": "c43dda3613b77156b5fe0fbdc5ee0e07586c6d722961c6cffc775509f1299b6e",
    "0037_workflow_lean.up.sql": "48867d9edc24fcac2996cc07dde6d1fd8d6f9d2f3282601174c598d1f933ad27",
    "0038_stable_plans.down.sql": "34d29fbb9576f851a62b6be58990633989783f2dcf041738f1e922564d5c78ef",
    "0038_stable_plans.up.sql": "a2c6bbd911fdce18e055dbcfe9c39882af378212794a2bba1cec8b0b66d3bbc6",
    "0039_stable_plans_held.up.sql": "414f8ecad9ab906dd6b0d7a3d77b081257221a3bfedb78344ec5547d8e513e7b",
    "0040_channel_stripes.down.sql": "2a93e07074c22c182c88dfa4bb3ceac62b0114c13ae37ae0b24d30c66c9d7ccb",
    "0040_channel_stripes.up.sql": "caf27052bc8520e66dea8cc627c553e20d98d84b209629e75b80aa945ca49079",
    "0041_stripes_everywhere.down.sql": "da7fa9e8821f8ef00d6c7d6e344586233709a999445035ba456c2fdf61332f5d",
    "0041_stripes_everywhere.up.sql": "151ba60ea3ba3c097c320aa8188a3cc208b3355e84a6848fc75221037272b4d3",
    "0042_bounded_outputs.down.sql": "7578c5afd1c715b1855086f7c5791fffcb916d09f3503b63a636d76b96b3498a",
    "0042_bounded_outputs.up.sql": "f666b8c03028d583bdc9a8a0f1269b1b3aa1ee4b8361dc2e1f323697e047d790",
    "0043_cancelled_steps.down.sql": "9cc791a2eaddae83cd7952580f24b7ec0a4f913db5092a54652e93aa76c132bf",
    "0043_cancelled_steps.up.sql": "f930633f51c26dc78228c24bf4114ab49e11110b8e80d765d453f4d4e0858af0",
    "0044_one_single_enqueue.up.sql": "72a952b89b60ab39b98f6b1e0922e173e151afd68ceafbdb7553d2b56bf12bb8",
    "0045_durable_handlers.down.sql": "c065a0858bdc7888eea33d4b981c26723771afcbd138fb4ed0bbf9a345e66568",
    "0045_durable_handlers.up.sql": "4023f03417a58d33a041d84a8cff2df6e9c71a81a08bbc73be75b858a088d8a6",
    "0046_consume.down.sql": "a230ddb412dde194f3f987f4228c281df0ffb1d0f1b540d4fb57a0c6f16ad0c3",
    "0046_consume.up.sql": "8ba51c1d814608ac21878286a7710c15c135fbde6d41d470df021ccb9457c683",
    "0047_stats_walk_in_index_order.down.sql": "5918612025f33e33704ef240cd0c79e79534cb6f1250f929aa48106bddeef601",
    "0047_stats_walk_in_index_order.up.sql": "4ceb5a4081ac51de467e6978639b3d651da138a06b46a9fed5da0abb917fb315",
    "0048_progress.down.sql": "e12ec7e66cec9647d869e779f1159c0e4b2dd0b08b62d31b17bdb7a8185ece04",
    "0048_progress.up.sql": "63619a05432b021b2175b8c1b52371ba45814c8c8c964b6b180c28813f9d6dfd",
    "0049_costs.down.sql": "9927c93baa917a7754b42be85755660c4e457d9356eda5a47e98bf9540fe1b4b",
    "0049_costs.up.sql": "a7262f2bdc75f67738cc33b137f4cd1955f89ab3fac676a7f4b71639c5f5e8dc",
    "0050_strict_order.down.sql": "1b4cd72fd541b1f946c36f028fe95bad2a7619f0dce41bd7b815c321daa6301f",
    "0050_strict_order.up.sql": "b490c36f3b536b8e8b3852582350dd20768d86d84865ffe757bccb151ea7d5ab",
    "0051_publish_costs.down.sql": "bb1efb974d9ffb79d65e4cafa8abbce775d8af5774227da066e64db060ef75e6",
    "0051_publish_costs.up.sql": "8596f2cedc713004510dac2ba6e9b0c6744c8ceef7121cfac7dfcda184421a56",
    "0052_ordered_plans.down.sql": "1a56c3ab41244564db9eeb9675c5a39b0a2b6f8124d27df9180204c142e9d14a",
    "0052_ordered_plans.up.sql": "2707e893a4f63702ac8c4c57557900930cdd00b6a6b5f8fe266a0f7c32857394",
    "0053_slots.down.sql": "0cb285601b686056cb43561a01fa2041c344e2e72e65b4c13fb965b01527fd28",
    "0053_slots.up.sql": "611eb52198c10481036f5e77f8fac088686bf04d3ca906e39d105cfce9c27ac8",
    "0054_ordered_resume.down.sql": "9d68df9bc37e647cab1e6b78846482502cdac7ce31aafb3135b4f4bdee4c4b03",
    "0054_ordered_resume.up.sql": "f6b2dcc33d5ee67d29a2c4a4163ffa1893258c31d3cec7aafebf59835628cd11",
    "0055_capped_bookkeeping.up.sql": "86d744943a72908dd6a32bfe2157d5973c5ab5f93591dec7c9b086fe0a0d84fc",
    "0056_dequeue_past_held_versions.up.sql": "2cfdf82555f88f18e91e33e055de34842a5b4b6c890742e65ed131b9bc9f2d43",
    "0057_head_after_the_leased.up.sql": "d70881d44039d3075e51f70bbb00cd58308b3cc662b89c44e32f25f99facbc43",
    "0058_ready_scan_after_the_taken.up.sql": "fb12c27c25d795e3f214ce5124fd02d45df2c19dc2ad390d1fd5a66c138150f8",
    "0059_channel_key.up.sql": "63b36363d3f1d1b245f7b77439e85e49a317a77d085d38ffa9355c4a68e34770",
    "0060_held_calls_from_the_mark.up.sql": "7ab8d34d2fa7294f5ffd4f4f541f4df44c7567fc3cf1a12f3828a3d3102011a0",
    "0061_eligible_mark_shared.up.sql": "ee23de866ae5e8de8dc0fad08bb6187941e1de81a0e46e846aab34a5c57a554c",
    "0062_ready_state_shared.up.sql": "950ee460975c340ea279a984fb0eb90aabf9285ec404de1365520e7f493e8471",
}

MIGRATIONS = sorted({name.split(".")[0] for name in sql.migration_files()})


def checksum(filename: str) -> str:
    return hashlib.sha256(sql.read(f"{sql.MIGRATIONS_DIR}/{filename}").encode()).hexdigest()


@pytest.mark.parametrize("filename", sql.migration_files())
def test_released_migration_file_is_pinned(filename):
    assert filename in RELEASED, (
        f"{filename} is not pinned: add it to RELEASED in {__file__} as {checksum(filename)!r}"
    )
    assert checksum(filename) == RELEASED[filename], (
        f"{filename} changed after its release; put the change in a new migration "
        "(docs/sql.md) and restore this file"
    )


def test_every_pinned_file_exists():
    assert set(RELEASED) == set(sql.migration_files())


@pytest.fixture
def scratch_database(django_db_setup, django_db_blocker) -> Iterator:
    """Make empty databases beside the test database; drops them afterwards."""
    with django_db_blocker.unblock():
        base = conftest.test_dsn()
    made: list[str] = []
    admin = conninfo.make_conninfo(base, dbname="postgres")

    def make(suffix: str) -> str:
        name = f"{conninfo.conninfo_to_dict(base)['dbname']}_{suffix}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}").format(pgsql.Identifier(name)))
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
        made.append(name)
        return conninfo.make_conninfo(base, dbname=name)

    yield make
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in made:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name)))


def migrate(dsn: str, target: str) -> None:
    """``manage.py migrate django_lonnymq <target>`` on the database ``dsn`` names."""
    params = conninfo.conninfo_to_dict(dsn)
    url = conftest.test_database_url().rsplit("/", 1)[0] + "/" + str(params["dbname"])
    env = {
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "PYTHONPATH": str(conftest.ROOT),
    }
    done = subprocess.run(
        [sys.executable, str(conftest.ROOT / "manage.py"), "migrate", "django_lonnymq", target, "-v", "0"],
        cwd=conftest.ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"migrate {target} failed:\n{done.stdout}{done.stderr}"


@contextlib.contextmanager
def migrator(dsn: str, django_db_blocker) -> Iterator[Callable[[str], None]]:
    """``migrate(target)`` for the database ``dsn`` names, run in this process through a database
    alias of its own: what ``migrate`` does, without the Django start-up a subprocess pays for
    each of the walk's hundred-odd steps."""
    from django.core.management import call_command
    from django.db import connections

    alias = "migration_walk"
    name = conninfo.conninfo_to_dict(dsn)["dbname"]
    connections.databases[alias] = {**connections.databases["default"], "NAME": name, "TEST": {"NAME": name}}

    def run(target: str) -> None:
        with django_db_blocker.unblock():
            call_command("migrate", "django_lonnymq", target, database=alias, verbosity=0, interactive=False)

    try:
        yield run
    finally:
        with django_db_blocker.unblock():
            connections[alias].close()
        del connections[alias]
        del connections.databases[alias]


def build_from_schema_file(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute(sql.schema())


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_schema_file_equals_a_database_migrated_from_zero(scratch_database):
    from_file, migrated = scratch_database("schema_file"), scratch_database("migrated")
    build_from_schema_file(from_file)
    migrate(migrated, MIGRATIONS[-1])
    expected, got = snapshot(from_file), snapshot(migrated)
    assert len(expected["functions"]) == len(sql.functions(sql.schema())) >= 30
    assert {"lonnymq_channel", "lonnymq_message", "lonnymq_dead_message"} <= {
        t[0] for t in expected["tables"]
    }
    diff = differences(expected, got, "schema.sql + superseded.sql", "migrated from zero")
    assert not diff, "sql/schema.sql, sql/superseded.sql and the migrations disagree:\n" + "\n".join(diff)


@pytest.mark.slow  # about a minute: a migrate command and a schema snapshot per step, each way
def test_each_step_reversed_gives_back_the_schema_before_it(scratch_database, django_db_blocker):
    dsn = scratch_database("steps")
    empty = snapshot(dsn)
    assert not any(empty.values())
    forward = {}
    with migrator(dsn, django_db_blocker) as migrate_to:
        for name in MIGRATIONS:
            migrate_to(name)
            forward[name] = snapshot(dsn)
        for earlier, later in reversed(list(zip(MIGRATIONS, MIGRATIONS[1:], strict=False))):
            migrate_to(earlier)
            diff = differences(forward[earlier], snapshot(dsn), f"up to {earlier}", f"down from {later}")
            assert not diff, f"reversing {later} did not give back {earlier}'s schema:\n" + "\n".join(diff)
        migrate_to("zero")
        assert snapshot(dsn) == empty
    # The last step up as a deploy runs it: ``manage.py migrate`` in a process of its own.
    migrate(dsn, MIGRATIONS[-1])
    assert not differences(forward[MIGRATIONS[-1]], snapshot(dsn), "first up", "second up")


@pytest.mark.parametrize("filename", sql.SCHEMA_FILES)
def test_a_function_is_defined_once_in_the_schema_files(filename):
    text = sql.read(filename)
    assert text.count("CREATE FUNCTION ") == len(sql.functions(text))
    assert "CREATE OR REPLACE" not in text  # the schema files state each object once
