"""Issue 30 (disk), items 2-4: grpoflow.preflight's disk check before anything runs.

- Quotas (grpoflow.quota): ``statvfs`` cannot see a Lustre, GPFS or NFS quota; the check asks ``lfs quota``,
  ``mmlsquota`` or ``quota``, and says plainly when none answered. The parsers read output printed by the real
  tools, as published in sites' documentation (each sample names its source).
- The Hub download of the start model into ``hf_home`` and the merged model ``results/<experiment>/model`` count
  where they share the checkpoints' filesystem.
- Tunix and TRL checkpoints count, at their size: recipe 003 (config/qwen3-8b-gsm8k-tunix.yaml: Qwen3-8B, fp32
  params + AdamW moments in Orbax, ~98 GB each, 4 kept) on a 100 GB filesystem (a TPU VM's boot disk) is refused at
  Snakemake's start, in one line naming the keys to change.
- Each start check has its own off switch, named at the end of its refusals: GRPOFLOW_SKIP_DISK_CHECK=1 skips the
  disk check alone, GRPOFLOW_SKIP_ENV_CHECK=1 the environment check alone; each says so in one log line.

The filesystems are real (tmpfs of the stated size: needs root); the Snakemake runs are real non-dry runs, stopped by
the check at onstart before any job."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from grpoflow_testing import (
    load_shipped,
    make_workdir,
    snakemake,
    unavailable,
    verl_vllm_overlay,
)

from grpoflow import quota
from grpoflow.quota import Limit

KIB = 1024

# ---- the quota tools' output -------------------------------------------------------------------------------------

# (parser, output, what it must read). Values in KiB unless suffixed; user and group names as published.
SAMPLES = {
    # OzSTAR (Swinburne) user docs, "Quota": `lfs quota /fred`; brackets mark values some servers did not report.
    "lfs-ozstar": (
        quota.parse_lfs_quota,
        "Disk quotas for usr username (uid 1000):\n"
        "     Filesystem    kbytes    quota   limit   grace   files   quota   limit   grace\n"
        "          /fred [1041408]  5242880 6291456       -     [0]       0       0       -\n",
        [Limit("o", 1041408 * KIB, 5242880 * KIB, 6291456 * KIB)],
    ),
    # NIG supercomputer docs, "FAQ (Change Storage Capacity)": `lfs quota -u your_account /lustre7`, with the
    # trailing info line Lustre prints for default quotas.
    "lfs-nig": (
        quota.parse_lfs_quota,
        "Disk quotas for usr your_account (uid ****):\n"
        "      Filesystem  kbytes   quota   limit   grace   files   quota limit   grace\n"
        "        /lustre7 982177580       0 1000000000       - 443208230 0       0       -\n"
        "uid **** is using default file quota setting\n",
        [Limit("o", 982177580 * KIB, 0, 1000000000 * KIB)],
    ),
    # A UIC (Illinois) course page: `lfs quota -h -u "${USER}" ./` (binary-suffixed sizes).
    "lfs-human": (
        quota.parse_lfs_quota,
        "Disk quotas for usr xdtr108 (uid 514559):\n"
        "     Filesystem    used   quota   limit   grace   files   quota   limit   grace\n"
        "             ./  792.3M      0k  9.537T       -       9       0 2000000       -\n",
        [Limit("o", int(792.3 * KIB**2), 0, int(9.537 * KIB**4))],
    ),
    # A GPFS site's user docs ("Quota"): plain `mmlsquota` (KiB).
    "mmlsquota-kb": (
        quota.parse_mmlsquota,
        "                         Block Limits                                    |     File Limits\n"
        "Filesystem type             KB      quota      limit   in_doubt    grace |    files   quota    limit in_doubt    grace  Remarks\n"
        "gpfs       USR        28292096 3221225472 4294967296          0     none |   136704 2000000  3000000        0     none\n",
        [Limit("o", 28292096 * KIB, 3221225472 * KIB, 4294967296 * KIB)],
    ),
    # Washington University RIS docs: `mmlsquota -g compute-ris --block-size auto scratch1-fs1`.
    "mmlsquota-auto-group": (
        quota.parse_mmlsquota,
        "Disk quotas for group compute-ris (gid 1208827):\n"
        "                         Block Limits                                    |     File Limits\n"
        "Filesystem type         blocks      quota      limit   in_doubt    grace |    files   quota    limit in_doubt    grace  Remarks\n"
        "scratch1-fs1 GRP          2.168T         3T         4T          0     none | 33226772       0        0        0     none\n",
        [Limit("o", int(2.168 * KIB**4), 3 * KIB**4, 4 * KIB**4)],
    ),
    # A fileset without limits (`mmlsquota -j scratch-mstr gpfs`, from a site's troubleshooting notes).
    "mmlsquota-no-limits": (
        quota.parse_mmlsquota,
        "                         Block Limits                                    |     File Limits\n"
        "Filesystem type             KB      quota      limit   in_doubt    grace |    files   quota    limit in_doubt    grace  Remarks\n"
        "gpfs       FILESET     no limits                                    \n",
        [],
    ),
    # `quota -w` (Linux quota-tools) on an NFS home, from a Rust tool's docs of the format it reads.
    "quota-nfs": (
        quota.parse_quota,
        "Disk quotas for user z1234567 (uid 12345):\n"
        "     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace\n"
        "reed:/export/reed/8 3156648  3190784 3509864          109859  319080  350988\n",
        [Limit("o", 3156648 * KIB, 3190784 * KIB, 3509864 * KIB)],
    ),
    # `quota -u ipa1` (no -w) on an NFS export, over its soft limit: the name alone on its line, `*`, a grace.
    "quota-wrapped-over": (
        quota.parse_quota,
        "Disk quotas for user ipa1 (uid 737000003): \n"
        "     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace\n"
        "10.10.10.130:/share/home\n"
        "                  15860*  15360   20480   6days      26       0       0 \n",
        [Limit("o", 15860 * KIB, 15360 * KIB, 20480 * KIB)],
    ),
    # `quota -g` as a user in three groups, two without a quota.
    "quota-groups": (
        quota.parse_quota,
        "Disk quotas for group eyd (gid 1001): \n"
        "     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace\n"
        "      /dev/sda3     104     550    5550              86       0       0        \n"
        "Disk quotas for group 5gigs (gid 1002): none\n"
        "Disk quotas for group test (gid 1006): none\n",
        [Limit("o", 104 * KIB, 550 * KIB, 5550 * KIB)],
    ),
}


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_the_quota_tools_output_is_read(sample):
    parse, text, expected = SAMPLES[sample]
    assert parse(text, "o") == expected


# ---- real filesystems ----------------------------------------------------------------------------------------------


@pytest.fixture
def filesystem(tmp_path):
    """factory(size) -> the mount point of a real tmpfs of ``size`` (a mount size: 100G, or bytes); needs root.
    tmpfs allocates nothing until written."""
    mounted = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"fs{len(mounted)}"
        mnt.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            unavailable(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def refused(workdir: Path, args: list[str], env: dict | None = None) -> list[str]:
    """A real (non-dry) Snakemake run from ``workdir`` (with ``env`` added to its environment); a start check must
    stop it at onstart. Returns its lines that start with ``grpoflow: ``. Hub access is off, so a run that is not
    stopped fails at its first download instead of fetching anything."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})}
    proc = snakemake(["--cores", "1", *args], workdir, env=offline, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out[-3000:]
    assert "rule download_model:" not in out and "rule train_grpo:" not in out, out[-3000:]  # no job started
    return [ln for ln in out.splitlines() if ln.startswith("grpoflow: ")]


def test_recipe_003_on_a_100_gb_filesystem_is_refused_at_start(filesystem):
    """Recipe 003 as shipped, its project on a 100 GB filesystem (a TPU VM's boot disk). Qwen3-8B has 8.19 B
    parameters: a Tunix checkpoint is 8.19 B x (4 + 8) B = 98 GB (fp32 params, AdamW's two fp32 moments), and Orbax
    writes the next before it removes the oldest: 5 at once with max_to_keep 4. Before, only verl experiments were
    checked: the run started and would have died writing its second checkpoint (step 1000)."""
    wd = make_workdir(filesystem("100G"))
    lines = refused(wd, ["--configfile", "config/qwen3-8b-gsm8k-tunix.yaml"])
    exp = "qwen3-8b-gsm8k-tunix"
    disk = [ln for ln in lines if ln.startswith(f"grpoflow: experiments.{exp}.checkpoint_dir ")]
    assert len(disk) == 1, lines
    assert disk[0] == (
        f"grpoflow: experiments.{exp}.checkpoint_dir results/{exp}/checkpoints: 107 GB free on its filesystem, but "
        "grpo.max_checkpoints_to_keep + 1 = 5 checkpoints of ~98 GB (qwen3-8b (qwen3-8b from sft.model), float32 "
        f"params + AdamW state, Orbax) need 491 GB more (with the merged model results/{exp}/model ~16 GB and the Hub "
        "download of Qwen/Qwen3-8B into hf_home resources/hf ~16 GB on the same filesystem: 524 GB): point "
        f"experiments.{exp}.checkpoint_dir (or hf_home) at a larger filesystem or free space; no "
        "grpo.max_checkpoints_to_keep fits here (1 keeps 2 during a save: 197 GB) (or GRPOFLOW_SKIP_DISK_CHECK=1 to "
        "skip this check)"
    )


def hub_verl_overlay(path: Path, exp: str) -> Path:
    """A verl experiment starting from a Hub id (Qwen/Qwen3-0.6B), 3 checkpoints kept at once, evaluated with
    transformers. Its cluster environment is unset: Snakemake's own interpreter, which lacks vLLM."""
    overlay = verl_vllm_overlay(
        path,
        exp,
        "Qwen/Qwen3-0.6B",
        grpo={"total_steps": 4, "save_freq": 1, "max_checkpoints_to_keep": 2},
        resources={"mem_mb": 16000},
    )
    cfg = yaml.safe_load(overlay.read_text())
    cfg["evaluation"]["backend"] = "transformers"
    overlay.write_text(yaml.safe_dump(cfg))
    return overlay


def test_the_hub_download_and_the_merged_model_count_on_the_checkpoints_filesystem(filesystem, tmp_path):
    """A verl experiment starting from a Hub id (Qwen/Qwen3-0.6B, 0.596 B params), its project on a 22.5 GB
    filesystem: its 3 kept checkpoints (3 x 7.15 GB) fit alone, not with the bf16 download into hf_home and the bf16
    merged model (1.19 GB each) beside them. Before, only the checkpoints counted and the run started. The
    environment check, which would refuse Snakemake's own interpreter (no vLLM), is off for the whole run
    (issue 30: GRPOFLOW_SKIP_ENV_CHECK=1 in Snakemake's environment) and says so."""
    wd = make_workdir(filesystem("22500000000"))
    exp = "hub-verl"
    overlay = hub_verl_overlay(tmp_path / "verl.yaml", exp)
    lines = refused(wd, ["--configfile", str(overlay)], env={"GRPOFLOW_SKIP_ENV_CHECK": "1"})
    assert "grpoflow: environment check skipped: GRPOFLOW_SKIP_ENV_CHECK=1" in lines, lines
    assert not [ln for ln in lines if " lacks " in ln], lines
    disk = [ln for ln in lines if ln.startswith(f"grpoflow: experiments.{exp}.checkpoint_dir ")]
    assert len(disk) == 1, lines
    assert re.fullmatch(
        rf"grpoflow: experiments\.{exp}\.checkpoint_dir results/{exp}/checkpoints: 22 GB free on its "
        r"filesystem, but grpo\.max_checkpoints_to_keep \+ 1 = 3 checkpoints of ~7\.15 GB \(qwen3-0\.6b \(qwen3-0\.6b "
        r"from sft\.model\), fp32 params \+ AdamW state\) need 21 GB more \(with the merged model "
        rf"results/{exp}/model ~1\.19 GB and the Hub download of Qwen/Qwen3-0\.6B into hf_home resources/hf ~1\.19 GB "
        rf"on the same filesystem: 24 GB\): point experiments\.{exp}\.checkpoint_dir \(or hf_home\) at a larger "
        rf"filesystem, free space, or lower experiments\.{exp}\.grpo\.max_checkpoints_to_keep to 1 "
        r"\(or GRPOFLOW_SKIP_DISK_CHECK=1 to skip this check\)",
        disk[0],
    ), disk


def test_the_disk_check_has_its_own_off_switch_named_in_its_refusal(filesystem, tmp_path):
    """Issue 30: GRPOFLOW_SKIP_DISK_CHECK=1 turns off the disk check alone. The run above, with that switch instead:
    the disk check says it was skipped and refuses nothing, and the environment check still stops the run, in one
    line naming what Snakemake's own interpreter lacks and its own switch."""
    wd = make_workdir(filesystem("22500000000"))
    overlay = hub_verl_overlay(tmp_path / "verl.yaml", "hub-verl")
    lines = refused(wd, ["--configfile", str(overlay)], env={"GRPOFLOW_SKIP_DISK_CHECK": "1"})
    assert "grpoflow: disk check skipped: GRPOFLOW_SKIP_DISK_CHECK=1" in lines, lines
    assert not [ln for ln in lines if ln.startswith("grpoflow: experiments.hub-verl.checkpoint_dir ")], lines
    env = [ln for ln in lines if " lacks " in ln]
    assert len(env) == 1, lines
    assert env[0].startswith("grpoflow: cluster_env (unset: Snakemake's own interpreter): ") and "vllm" in env[0]
    assert env[0].endswith(" (or GRPOFLOW_SKIP_ENV_CHECK=1 to skip this check)"), env


def test_the_demos_experiments_are_sized_from_its_tiny_model_before_it_exists(default_config, tmp_path, monkeypatch):
    """The demo's start model is built by the workflow: at the first call there is no config.json to read, so the
    demo's experiments are sized from demo.tiny_model (the model demo/tiny.py builds), and nothing is "unknown"."""
    from grpoflow.config import resolve_config
    from grpoflow.preflight import check_disk, checkpoint_bytes, sized_experiment

    monkeypatch.chdir(tmp_path)  # no resources/demo here: the state of a fresh clone
    cfg = resolve_config(default_config)
    names = list(cfg.experiments)
    assert all(cfg.uses_demo_sft(n) for n in names)
    failures, notes = check_disk(cfg, names, merges=names)
    assert failures == [] and notes == []
    tiny = cfg.demo["tiny_model"]
    size, how = checkpoint_bytes(sized_experiment(cfg, names[0]))
    # 4 layers of hidden 128 and a tied ~(vocab + 2) x 128 embedding: well under 10 MB of float32 params + AdamW.
    assert 0 < size < 3 * 4 * 5e6 and tiny["hidden_size"] == 128, (size, how)


def _tiny_verl_config(ckpt: Path):
    from grpoflow.config import resolve_config

    raw = load_shipped("config/qwen3-32b-gsm8k.yaml")
    name = next(iter(raw["experiments"]))
    raw["experiments"] = {
        "q": {
            **raw["experiments"][name],
            "checkpoint_dir": str(ckpt),
            "architecture": "qwen3-0.6b",
            "grpo": {"total_steps": 4, "save_freq": 1, "max_checkpoints_to_keep": 2},
        }
    }
    return resolve_config(raw)


def stand_in_quota(bindir: Path, mount: Path, used_kib: int, limit_kib: int) -> None:
    """Stands in for quota-tools' ``quota`` (an NFS server's rquotad, or a local quota, answering for ``mount``):
    prints its ``-w`` table for the user, as the real tool does, with the given usage and hard limit; no group quota."""
    bindir.mkdir(exist_ok=True)
    table = (
        "Disk quotas for user me (uid 1000):\n"
        "     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace\n"
        f"{mount} {used_kib}  0 {limit_kib}          10  0  0\n"
    )
    script = f"#!/bin/sh\ncase \" $* \" in *' -g '*) echo 'Disk quotas for group me (gid 1000): none';; *) printf '%s' '{table}';; esac\n"
    (bindir / "quota").write_text(script)
    (bindir / "quota").chmod(0o755)


def test_a_quota_below_the_free_space_is_what_the_check_counts(filesystem, tmp_path, monkeypatch):
    """64 GB free on the filesystem, but 20 GB of quota with 1 GB used: the 3 kept checkpoints of a Qwen3-0.6B verl
    run (21.5 GB) do not fit, and the refusal names the quota. Before, statvfs's 64 GB passed it."""
    from grpoflow.preflight import check_disk

    mnt = filesystem("64G")
    stand_in_quota(tmp_path / "bin", mnt, used_kib=10**6, limit_kib=20 * 10**6)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    failures, _ = check_disk(_tiny_verl_config(mnt / "ckpt"), ["q"])
    assert len(failures) == 1, failures
    assert failures[0].startswith(
        f"experiments.q.checkpoint_dir {mnt / 'ckpt'}: 19 GB left in the user {_user()} quota (20 GB) on tmpfs at "
        f"{mnt} (quota), but grpo.max_checkpoints_to_keep + 1 = 3 checkpoints of ~7.15 GB"
    ), failures


def test_without_a_quota_tool_the_check_says_quotas_are_not_checked(filesystem, tmp_path, monkeypatch):
    from grpoflow.preflight import check_disk

    mnt = filesystem("64G")
    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    failures, notes = check_disk(_tiny_verl_config(mnt / "ckpt"), ["q"])
    assert failures == []
    assert notes == [
        f"disk: 21 GB needed where {mnt / 'ckpt'} live(s): 69 GB free; quota not checked on tmpfs at {mnt}: no `quota` "
        "command (free space is the filesystem's)"
    ]


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def test_the_mount_is_found_for_a_path_with_a_space(filesystem):
    mnt = filesystem("1M")
    spaced = mnt / "a b"
    spaced.mkdir()
    other = spaced.parent.parent / "x y"
    other.mkdir()
    sub = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(other)], capture_output=True)
    try:
        assert sub.returncode == 0
        assert quota.mount_of(str(other / "f")) == (str(other), "tmpfs", "tmpfs")
        assert quota.mount_of(str(spaced)) == (str(mnt), "tmpfs", "tmpfs")
    finally:
        subprocess.run(["umount", "-l", str(other)], capture_output=True)
