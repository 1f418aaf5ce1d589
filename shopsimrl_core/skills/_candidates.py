"""Skill candidates: procedural hints proposed from labelled TRAIN-split episodes.

Pipeline (deterministic for the rule-based miner):

1. Refuse any evidence that is not from the ``train`` split (spec §18.3, §22.6): gates use val,
   final numbers use test, and neither may shape the skills they judge.
2. Group episodes by failure label (outcome classes and behaviour labels, see ``_labels``) and keep
   the groups with at least ``min_support`` episodes ("frequent" labels).
3. For each group collect contrasting evidence: successful episodes of the same situation (same task
   first, then the same category, then any success) with the steps that made them work.
4. Ask a ``CandidateProvider`` for chunks (title, workflow stage, applies-when, procedure,
   verification, common failure) and render them in the chunk format of spec §18.4.
5. Validate and firewall every chunk (``_firewall``); rejected candidates are kept with the reason.

The result is ``skill_candidates.json`` (``shopsimrl-skill-candidates-v1``), every candidate carrying
evidence references ``{episode_id, step_index, role, label}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from shopsimrl_core._errors import SkillError
from shopsimrl_core.skills._firewall import FirewallContext, check_text, context_from_traces
from shopsimrl_core._hashing import fingerprint, sha256_file, write_json_atomic
from shopsimrl_core.analysis._labels import iter_latest_records, read_labels
from shopsimrl_core._versions import SKILL_CANDIDATES_SCHEMA

__all__ = [
    "FailureGroup",
    "CandidateProvider",
    "RuleBasedMiner",
    "CandidateSet",
    "chunk_id_for",
    "render_chunk",
    "validate_chunk",
    "build_failure_groups",
    "propose_candidates",
    "mine_candidates",
    "require_train_only",
    "MINED_LABEL_PREFIXES",
]

# Labels that describe agent behaviour worth a skill. "failed" (a crashed attempt) and "other" are
# infrastructure, not behaviour, so no skill can fix them.
MINED_LABEL_PREFIXES = ("outcome:", "behaviour:first_buy_incomplete_options", "behaviour:loop", "budget:ignored",
                        "invalid_action:", "protocol_error:")
_NOT_MINED = {"outcome:success", "outcome:failed", "outcome:other"}
_TEXT_FIELDS = ("title", "workflow_stage", "applicable_when", "verification", "common_failure")
_SANITISE = re.compile(r"[^A-Za-z0-9._-]+")


# --------------------------------------------------------------------------- chunk format


def _sanitise(name: str) -> str:
    return _SANITISE.sub("-", name.strip()).strip("-.")


def chunk_id_for(title: str, evidence_cluster_ids: Sequence[str]) -> str:
    """Chunk id of spec §18.4: ``sanitise(title).lower()``, else ``chunk-`` + 12 hex of a fingerprint."""
    sanitised = _sanitise(title).lower()
    if sanitised:
        return sanitised
    digest = fingerprint({"title": title, "evidence_cluster_ids": sorted(evidence_cluster_ids)})
    return "chunk-" + digest[:12]


def render_chunk(chunk: dict[str, Any]) -> str:
    """The SkillBank ``content`` of a chunk, in the exact text layout of spec §18.4."""
    lines = [f"### {chunk['title'].strip()}", "", f"- Applies when: {chunk['applicable_when'].strip()}", "- Procedure:"]
    for number, step in enumerate(chunk["procedure"], start=1):
        lines.append(f"  {number}. {step.strip()}")
    lines.append(f"- Verify: {chunk['verification'].strip()}")
    lines.append(f"- Avoid: {chunk['common_failure'].strip()}")
    return "\n".join(lines)


def validate_chunk(chunk: Any) -> str | None:
    """Return why a proposed chunk is not well-formed, or None when it is."""
    if not isinstance(chunk, dict):
        return "chunk must be an object"
    for key in _TEXT_FIELDS:
        value = chunk.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"{key} must be a non-blank string"
    procedure = chunk.get("procedure")
    if not isinstance(procedure, list) or not 1 <= len(procedure) <= 8:
        return "procedure must be a list of 1-8 steps"
    if not all(isinstance(step, str) and step.strip() for step in procedure):
        return "every procedure step must be a non-blank string"
    if len(render_chunk(chunk)) > 1500:
        return "chunk text is longer than 1500 characters"
    return None


# --------------------------------------------------------------------------- groups


@dataclass
class FailureGroup:
    """Episodes sharing one failure label, with contrasting successes of the same situation."""

    label: str
    support: int
    failures: list[dict[str, Any]] = field(default_factory=list)
    """Per failing episode: ``{episode_id, task_id, category, steps: [evidence step indexes]}``."""
    contrasts: list[dict[str, Any]] = field(default_factory=list)
    """Per contrasting success: ``{episode_id, task_id, match: task|category|any, steps}``."""
    digest: list[dict[str, Any]] = field(default_factory=list)
    """Compact, identifier-redacted step excerpts for model-based providers (not used by the miner)."""

    @property
    def cluster_id(self) -> str:
        return "failure-label-" + _sanitise(self.label.replace(":", "-")).lower()

    def evidence_refs(self) -> list[dict[str, Any]]:
        refs = []
        for item in self.failures:
            for step in item["steps"] or [None]:
                refs.append({"episode_id": item["episode_id"], "step_index": step, "role": "failure", "label": self.label})
        for item in self.contrasts:
            for step in item["steps"] or [None]:
                refs.append({"episode_id": item["episode_id"], "step_index": step, "role": "contrast_success",
                             "label": "outcome:success", "match": item["match"]})
        return refs


def require_train_only(splits: Iterable[Any], source: str) -> None:
    """Refuse evidence from any split other than ``train``.

    Raises:
        SkillError (code ``evidence-not-train``): a val, test or unknown split is present.
    """
    bad = sorted({str(s) for s in splits if s != "train"})
    if bad:
        raise SkillError(
            f"{source}: skill candidates read train-split evidence only, found split(s) {bad}; "
            "point skill building at a train-suite run (val is for gates, test for final numbers)",
            code="evidence-not-train", splits=bad,
        )


def _is_mined(label: str) -> bool:
    return label not in _NOT_MINED and label.startswith(MINED_LABEL_PREFIXES)


def build_failure_groups(
    rows: Sequence[dict[str, Any]], *, min_support: int = 2, max_examples: int = 5, max_contrasts: int = 3
) -> list[FailureGroup]:
    """Group label rows by failure label; keep labels carried by at least *min_support* episodes.

    Groups are ordered by support (descending) then label, and each group's examples by episode id,
    so the same rows always give the same groups.
    """
    ordered = sorted(rows, key=lambda r: r["episode_id"])
    evidence = {r["episode_id"]: json.loads(r["evidence_json"]) for r in ordered}
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in ordered:
        for label in row["labels"]:
            if _is_mined(label):
                by_label.setdefault(label, []).append(row)
    successes = [r for r in ordered if r["outcome"] == "success"]
    groups: list[FailureGroup] = []
    for label, members in by_label.items():
        if len(members) < min_support:
            continue
        group = FailureGroup(label=label, support=len(members))
        member_ids = {m["episode_id"] for m in members}
        for row in members[:max_examples]:
            steps = evidence[row["episode_id"]].get(label, [])
            group.failures.append({"episode_id": row["episode_id"], "task_id": row["task_id"],
                                   "category": row["category"], "steps": list(steps)})
        seen: set[str] = set()
        for match in ("task", "category", "any"):
            for row in members[:max_examples]:
                for s in successes:
                    if len(group.contrasts) >= max_contrasts:
                        break
                    if s["episode_id"] in seen or s["episode_id"] in member_ids:
                        continue
                    same = {"task": s["task_id"] == row["task_id"],
                            "category": s["category"] is not None and s["category"] == row["category"],
                            "any": True}[match]
                    if same:
                        seen.add(s["episode_id"])
                        steps = sorted(set((s.get("option_steps") or []) + ([s["purchase_step"]] if s["purchase_step"] else [])))
                        group.contrasts.append({"episode_id": s["episode_id"], "task_id": s["task_id"],
                                                "match": match, "steps": steps})
        groups.append(group)
    groups.sort(key=lambda g: (-g.support, g.label))
    return groups


# --------------------------------------------------------------------------- providers


class CandidateProvider(Protocol):
    """Anything that turns one failure group into proposed chunks (dicts with the chunk fields)."""

    identity: dict[str, Any]

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]: ...


def _t(title: str, stage: str, when: str, procedure: list[str], verify: str, avoid: str) -> dict[str, Any]:
    return {"title": title, "workflow_stage": stage, "applicable_when": when, "procedure": procedure,
            "verification": verify, "common_failure": avoid}


# Project wording. Chinese because the environment and the default prompt are Chinese; no template
# mentions any product, brand, id or option value, so the firewall passes them by construction.
_TEMPLATES: dict[str, dict[str, Any]] = {
    "outcome:wrong_option": _t(
        "逐项核对规格", "option_selection", "商品详情页有颜色、尺码等规格轴，且任务或用户资料提到了偏好",
        ["先读出任务和用户资料中对颜色、尺码、款式的要求", "对每个规格轴逐一点击与要求最接近的值，不要保留默认值",
         "全部选完后再看一遍已选规格，与要求逐项对照"],
        "已选规格中的每一项都能在任务或用户资料中找到依据", "只选了一个轴或随手选第一个值就购买"),
    "outcome:missing_attributes": _t(
        "购买前核对关键属性", "product_selection", "搜索结果中有多个相似商品，任务要求了材质、功能或规格等属性",
        ["把任务中的每个属性词列成清单", "在标题和关键属性中逐个寻找这些词", "缺少任一属性时返回结果页换一个商品"],
        "清单上的属性都出现在商品标题或关键属性中", "只看品类相符就购买，忽略材质或功能要求"),
    "outcome:wrong_type": _t(
        "确认商品品类", "search", "搜索结果混有配件、相关用品或其他品类的商品",
        ["搜索词以商品类型的名词为主，再加一两个关键属性", "点开商品前先看类目路径是否就是所要的品类",
         "类目不符时不要购买，换更准确的搜索词"],
        "商品类目路径与任务要买的东西属于同一品类", "买到配件或相近但不同类型的商品"),
    "outcome:over_budget": _t(
        "购买前核验价格与预算", "purchase", "任务或用户资料给出了预算或价位偏好",
        ["从任务和用户资料中确定预算上限", "选完规格后查看页面显示的当前价格", "价格超过预算时换规格或换商品"],
        "当前选中规格的价格不高于预算", "只看列表价就购买，而所选规格更贵"),
    "budget:ignored": _t(
        "预算是硬性约束", "product_selection", "用户资料或任务中有预算偏好，而候选商品价格差异较大",
        ["在结果页优先点开价格在预算内的商品", "比较两三个预算内的候选后再决定", "不要因为属性更多而接受超预算的商品"],
        "最终价格在预算之内", "为了更好的配置超出预算"),
    "outcome:price_unverifiable": _t(
        "让价格确定下来再购买", "option_selection", "商品价格随规格变化，页面还没有显示确定的当前价格",
        ["依次选择会影响价格的规格", "确认页面出现了当前规格的确定价格", "价格仍不确定时换一个价格明确的商品"],
        "购买前页面显示了所选规格的确定价格", "在价格区间未确定时直接购买"),
    "outcome:action_limit": _t(
        "在步数用完前完成购买", "search", "已经翻阅多页结果或反复进出商品页仍未决定",
        ["最多浏览两三页结果，记下最符合要求的候选", "选定候选后直接进入详情页完成规格选择",
         "剩余步数不多时购买当前最合适的候选"],
        "在步数上限之前完成了购买", "无限翻页或来回比较直到步数耗尽"),
    "outcome:generation_length": _t(
        "思考保持简短", "protocol", "需要在多个候选之间权衡，思考容易变长",
        ["只思考与当前页面决策相关的要点", "尽快给出一次工具调用", "不要在思考中逐条复述整个页面"],
        "每一轮都以恰好一次工具调用结束", "长篇推理导致输出被截断"),
    "behaviour:first_buy_incomplete_options": _t(
        "购买前完成全部规格选择", "option_selection", "商品详情页仍提示需要选择规格",
        ["查看页面列出的仍需选择的规格轴", "为每个缺少的轴点击一个符合要求的值", "等页面显示规格已全部选择后再点击购买"],
        "购买按钮出现在可点击值中", "规格未选全就点击购买"),
    "invalid_action:incomplete_options": _t(
        "规格选全后购买按钮才会出现", "purchase", "想要购买但可点击值中没有购买按钮",
        ["对照缺少的规格轴逐个完成选择", "只在可点击值中出现购买按钮时才点击它"],
        "点击的购买按钮来自当前可点击值列表", "在按钮未出现时尝试购买"),
    "behaviour:loop": _t(
        "避免来回跳转", "product_selection", "已经进出同一商品页或重复同一次搜索",
        ["记住已经看过并排除的商品", "回到结果页后选择一个没看过的候选", "同一个搜索词不要重复搜索，需要时换词"],
        "每次进入的商品页都是新的候选", "在同两个页面之间反复切换"),
    "invalid_action:unavailable_action": _t(
        "逐字复制可点击值", "protocol", "需要点击按钮、商品或规格",
        ["只从当前页面的可点击值列表中选择", "原样复制该值，包括大小写和空格", "页面变化后重新读取可点击值"],
        "点击值与列表中的某一项完全一致", "凭记忆或改写后的文字点击"),
    "invalid_action:already_selected": _t(
        "不要重复点击已选规格", "option_selection", "规格已经选中，页面仍停留在详情页",
        ["先查看已选规格", "只点击尚未选择或需要更改的规格轴"], "每次点击都改变了已选规格",
        "重复点击同一个已选值"),
    "invalid_action:search_unavailable": _t(
        "只在首页搜索", "search", "想换搜索词但当前不在搜索首页",
        ["先点击返回搜索回到首页", "在首页输入新的搜索词"], "搜索只在提供搜索工具的页面发起",
        "在结果页或详情页直接搜索"),
}
_GENERIC_INVALID = _t(
    "动作格式保持规范", "protocol", "页面返回动作无效的提示",
    ["阅读页面给出的无效原因", "只使用当前提供的工具", "点击值原样复制，搜索词简洁且非空"],
    "下一步动作被页面执行", "重复同一个无效动作")
_GENERIC_PROTOCOL = _t(
    "每轮只调用一个工具", "protocol", "需要执行任何动作",
    ["在思考中完成推理，正文不输出文字", "每轮恰好调用一个当前提供的工具", "参数严格按照工具说明填写"],
    "回复中只有一次工具调用而没有正文", "在工具调用旁输出说明文字或一次调用多个工具")


class RuleBasedMiner:
    """Deterministic, offline provider: one project-written template per failure label.

    Templates never quote instance data (ids, titles, brands, options), so what they produce is
    deployable by construction; the firewall still checks them like any other provider's output.
    """

    identity: dict[str, Any] = {"provider": "rule_based_miner", "version": "shopsimrl-rule-miner-v1",
                                "templates_sha256": fingerprint(
                                    {"templates": _TEMPLATES, "invalid": _GENERIC_INVALID, "protocol": _GENERIC_PROTOCOL})}

    def propose(self, group: FailureGroup) -> list[dict[str, Any]]:
        """Return the template chunk of the group's label (a copy), or the generic one of its family."""
        template = _TEMPLATES.get(group.label)
        if template is None and group.label.startswith("invalid_action:"):
            template = _GENERIC_INVALID
        if template is None and group.label.startswith("protocol_error:"):
            template = _GENERIC_PROTOCOL
        if template is None:
            return []
        return [json.loads(json.dumps(template))]


# --------------------------------------------------------------------------- mining


@dataclass(frozen=True)
class CandidateSet:
    """The written candidates document and headline counts."""

    path: Path
    document: dict[str, Any]

    @property
    def accepted(self) -> list[dict[str, Any]]:
        return [c for c in self.document["candidates"] if c["status"] == "accepted"]

    @property
    def rejected(self) -> list[dict[str, Any]]:
        return [c for c in self.document["candidates"] if c["status"] == "rejected"]


def propose_candidates(
    groups: Sequence[FailureGroup],
    provider: CandidateProvider,
    firewall: FirewallContext,
    *,
    max_accepted: int = 16,
) -> list[dict[str, Any]]:
    """Ask *provider* for chunks per group, validate, firewall, dedupe and number them.

    Returns candidate records with ``status`` ``accepted`` or ``rejected`` (``reason`` says why:
    ``invalid: …``, ``firewall: code(match), …``, ``duplicate_of: <id>`` or ``over_cap``).
    """
    out: list[dict[str, Any]] = []
    by_content: dict[str, str] = {}
    used_ids: dict[str, str] = {}
    accepted = 0
    for group in groups:
        try:
            proposals = provider.propose(group)
        except SkillError as exc:  # a provider that cannot produce valid output rejects, never aborts
            proposals = [{"__error__": exc.one_line()}]
        for chunk in proposals:
            record: dict[str, Any] = {"candidate_id": None, "status": "accepted", "reason": None,
                                      "source_label": group.label, "support": group.support,
                                      "provider": provider.identity.get("provider"),
                                      "evidence_cluster_ids": [group.cluster_id],
                                      "evidence": group.evidence_refs(), "firewall_findings": []}
            if isinstance(chunk, dict) and "__error__" in chunk:
                record.update(status="rejected", reason="invalid: " + chunk["__error__"])
                record["candidate_id"] = f"rejected-{len(out) + 1:03d}"
                out.append(record)
                continue
            problem = validate_chunk(chunk)
            if problem is not None:
                record.update(status="rejected", reason="invalid: " + problem, raw=chunk)
                record["candidate_id"] = f"rejected-{len(out) + 1:03d}"
                out.append(record)
                continue
            fields = {k: chunk[k].strip() for k in _TEXT_FIELDS}
            fields["procedure"] = [s.strip() for s in chunk["procedure"]]
            content = render_chunk(fields)
            record.update(fields)
            record["content"] = content
            record["content_sha256"] = fingerprint(content)  # JSON-quoted string convention, spec §2.2
            base_id = chunk_id_for(fields["title"], record["evidence_cluster_ids"])
            cid, n = base_id, 1
            while cid in used_ids and used_ids[cid] != record["content_sha256"]:
                n += 1
                cid = f"{base_id}-{n}"
            record["candidate_id"] = cid
            findings = check_text(content, firewall)
            if findings:
                record.update(status="rejected", firewall_findings=[f.to_dict() for f in findings],
                              reason="firewall: " + ", ".join(f"{f.code}({f.match})" for f in findings))
            elif record["content_sha256"] in by_content:
                record.update(status="rejected", reason="duplicate_of: " + by_content[record["content_sha256"]])
                record["candidate_id"] = cid + "-dup"
            elif accepted >= max_accepted:
                record.update(status="rejected", reason=f"over_cap: at most {max_accepted} accepted candidates")
            else:
                accepted += 1
                by_content[record["content_sha256"]] = cid
                used_ids[cid] = record["content_sha256"]
            out.append(record)
    return out


def mine_candidates(
    labels_path: str | Path,
    traces_path: str | Path,
    out_path: str | Path,
    *,
    provider: CandidateProvider | None = None,
    min_support: int = 2,
    max_accepted: int = 16,
) -> CandidateSet:
    """Mine skill candidates from a TRAIN run's labels and traces and write ``skill_candidates.json``.

    Deterministic with the default ``RuleBasedMiner``: the same labels and traces give the same
    document except ``created_at``; ``candidates_sha256`` covers everything but the time.

    Raises:
        SkillError (``evidence-not-train``): a label row or trace is not from the train split.
        SkillError (``redacted-evidence``): the traces are an export (their goals are gone).
        TraceFormatError: the labels table or traces file is missing or of an unknown version.
    """
    provider = provider or RuleBasedMiner()
    df = read_labels(labels_path)
    require_train_only(df.get_column("split").to_list(), str(labels_path))
    records = list(iter_latest_records(traces_path))
    require_train_only([(r.get("job") or {}).get("split") for r in records], str(traces_path))
    if any("redaction" in r for r in records):
        # The firewall needs the private goal (titles, gold options) that exports remove.
        raise SkillError(f"{traces_path}: holds exported (redacted) traces; mine the raw run directory instead",
                         code="redacted-evidence")
    rows = df.to_dicts()
    label_ids = {r["episode_id"] for r in rows}
    trace_ids = {r["episode_id"] for r in records}
    if label_ids != trace_ids:
        raise SkillError(
            f"{labels_path}: labels cover {len(label_ids)} episodes but {traces_path} has {len(trace_ids)}; "
            "re-materialize episode_labels for these traces",
            code="labels-out-of-date",
        )
    firewall = context_from_traces(records)
    groups = build_failure_groups(rows, min_support=min_support)
    if hasattr(provider, "attach_traces"):
        provider.attach_traces({r["episode_id"]: r for r in records})  # model-based providers need step excerpts
    candidates = propose_candidates(groups, provider, firewall, max_accepted=max_accepted)
    support = {}
    for row in rows:
        for label in row["labels"]:
            if _is_mined(label):
                support[label] = support.get(label, 0) + 1
    core = {
        "schema_version": SKILL_CANDIDATES_SCHEMA,
        "provider": provider.identity,
        "source": {"labels_path": str(labels_path), "labels_sha256": sha256_file(labels_path),
                   "traces_path": str(traces_path), "traces_sha256": sha256_file(traces_path),
                   "episodes": len(rows), "splits": {"train": len(rows)}, "train_only": True},
        "min_support": min_support,
        "max_accepted": max_accepted,
        "label_support": dict(sorted(support.items())),
        "frequent_labels": [g.label for g in groups],
        "accepted_count": sum(1 for c in candidates if c["status"] == "accepted"),
        "rejected_count": sum(1 for c in candidates if c["status"] == "rejected"),
        "candidates": candidates,
    }
    document = {"schema_version": SKILL_CANDIDATES_SCHEMA,
                "created_at": datetime.now(timezone.utc).isoformat(),
                **{k: v for k, v in core.items() if k != "schema_version"},
                "candidates_sha256": fingerprint({k: v for k, v in core.items() if k != "source"} | {
                    "source": {k: v for k, v in core["source"].items() if not k.endswith("_path")}})}
    target = write_json_atomic(out_path, document)
    return CandidateSet(path=target, document=document)
