"""The viewer's HTML templates (Jinja2, autoescape on for every template: trace text is untrusted).

No template marks anything ``|safe``; links are built from URL-quoted parts; no script is served
(the Content-Security-Policy forbids scripts anyway).
"""

# ruff: noqa: E501  (HTML template lines stay whole; wrapping them would change the pages)
from __future__ import annotations

from typing import Any

__all__ = ["environment"]

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>{% block title %}shopsimrl view{% endblock %} · shopsimrl</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:8px 16px}header a{color:#cfe3ff;margin-right:14px;text-decoration:none}
main{padding:12px 18px;max-width:1500px}
table{border-collapse:collapse;background:#fff;margin:6px 0 14px}td,th{border:1px solid #dde1e7;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eef1f5}th a{color:inherit}
pre{white-space:pre-wrap;word-break:break-word;background:#fff;border:1px solid #dde1e7;padding:6px 8px;margin:4px 0;max-height:420px;overflow:auto}
details>summary{cursor:pointer;color:#2457a6}
.step{background:#fff;border:1px solid #cfd5de;border-radius:4px;padding:8px 12px;margin:10px 0}
.bad{color:#a11}.ok{color:#176d2c}.muted{color:#667}.private{border:2px dashed #b7791f;padding:6px 10px;background:#fffaf0}
.cols{display:flex;gap:16px}.cols>div{flex:1;min-width:0}
form.filters label{margin-right:10px;white-space:nowrap}form.filters input[type=number]{width:6em}
.tag{display:inline-block;border-radius:3px;padding:0 5px;background:#e6eaf0;margin-right:4px}
.tag.bad{background:#fde8e8}.tag.ok{background:#e5f6ea}
</style></head><body>
<header><a href="/">Runs</a>{% block nav %}{% endblock %}</header>
<main>{% block body %}{% endblock %}</main></body></html>
"""

_MACROS = """
{% macro num(v, digits=4) -%}{% if v is none %}<span class="muted">–</span>{% elif v is number %}{{ ('%.' ~ digits ~ 'g') | format(v) }}{% else %}{{ v }}{% endif %}{%- endmacro %}
{% macro pre(v) -%}<pre>{{ v }}</pre>{%- endmacro %}
{% macro fixed(v, digits=3) -%}{% if v is number %}{{ ('%.' ~ digits ~ 'f') | format(v) }}{% else %}<span class="muted">–</span>{% endif %}{%- endmacro %}
{% macro signed(v, digits=3) -%}{% if v is number %}{{ ('%+.' ~ digits ~ 'f') | format(v) }}{% else %}<span class="muted">–</span>{% endif %}{%- endmacro %}
{% macro ci(low, high, digits=3, sign=False) -%}{% if low is number and high is number %}{% set f = '%+.' if sign else '%.' %}[{{ (f ~ digits ~ 'f') | format(low) }}, {{ (f ~ digits ~ 'f') | format(high) }}]{% else %}<span class="muted">–</span>{% endif %}{%- endmacro %}
"""

_RUNS = """{% extends "base" %}{% import "macros" as m %}
{% block title %}Runs{% endblock %}
{% block body %}
<h1>Runs</h1>
<p class="muted">Roots: {% for r in roots %}<code>{{ r }}</code> {% endfor %}</p>
<form class="filters" method="get" action="/"><label>run path contains <input type="search" name="q" value="{{ q }}"></label>
<label>per page <input type="number" name="per" value="{{ per }}" min="1" max="500"></label> <button type="submit">show</button>{% if q %} <a href="/">all runs</a>{% endif %}</form>
<p id="run-count"><span id="runs-total">{{ total }}</span> run{{ '' if total == 1 else 's' }}{% if q %} matching <code>{{ q }}</code>{% endif %}{% if total %} · {{ first }}–{{ last }} shown · page <span id="runs-page">{{ page }}</span> of <span id="runs-pages">{{ pages }}</span>{% endif %}
{% if prev_href %}<a id="runs-prev" href="{{ prev_href }}">« previous</a>{% endif %} {% if next_href %}<a id="runs-next" href="{{ next_href }}">next »</a>{% endif %}</p>
{% if not runs %}<p>No run directory (a folder with traces.jsonl or manifest.json) under the roots{% if q %} matches{% endif %}.</p>{% endif %}
<table id="runs"><tr><th>run</th><th>suite / split</th><th>checkpoint</th><th>episodes</th><th>coverage</th>
<th>reward mean</th><th>success rate</th><th>failed</th><th>labels</th></tr>
{% for r in runs %}<tr class="run">
<td><a href="{{ r.href }}">{{ r.rel }}</a></td><td>{{ r.split }}</td><td>{{ r.checkpoint }}</td>
<td>{{ '?' if r.completed is none else r.completed }}/{{ '?' if r.requested is none else r.requested }}{% if r.source == 'index' %} <span class="tag" title="no summary.json yet: counted from the run index">in flight</span>{% endif %}</td><td>{{ m.num(r.coverage, 3) }}</td><td>{{ m.num(r.reward_mean) }}</td>
<td>{{ m.num(r.success_rate) }}</td><td>{{ '?' if r.failed is none else r.failed }}</td><td>{{ 'yes' if r.labels else '' }}
{% for n in r.too_large %}<span class="tag bad too-large" title="{{ n }}">{{ n }}</span>{% endfor %}{% if r.refused %}<span class="tag bad refused">{{ r.refused }}</span>{% endif %}</td></tr>
{% endfor %}</table>
{% if total > 1 %}
<h2>Compare two runs</h2>
<form method="get" action="/compare"><datalist id="run-paths">{% for r in runs %}<option value="{{ r.rel }}">{% endfor %}</datalist>
A <input name="a" list="run-paths" size="40" value="{{ runs[0].rel if runs else '' }}">
B <input name="b" list="run-paths" size="40" value="{{ runs[1].rel if runs|length > 1 else '' }}">
<button type="submit">compare</button> <span class="muted">(run paths as listed above; any run under the roots)</span></form>
{% endif %}
{% endblock %}"""

_RUN = """{% extends "base" %}{% import "macros" as m %}
{% block title %}{{ rel }}{% endblock %}
{% block nav %}<a href="{{ run_href }}">{{ rel }}</a>{% endblock %}
{% block body %}
<h1>Run <code>{{ rel }}</code></h1>
<p>{{ meta.split }} · checkpoint <b>{{ meta.checkpoint }}</b> · model {{ meta.model }}</p>
{% for n in too_large %}<p class="bad too-large">{{ n }}</p>{% endfor %}
{% if summary %}
<table id="summary"><tr><th>requested</th><th>completed</th><th>failed</th><th>coverage</th><th>reward mean</th><th>reward SEM</th>
<th>success rate</th><th>steps mean</th><th>protocol error rate</th><th>invalid action rate</th></tr>
<tr><td>{{ summary.counts.requested }}</td><td>{{ summary.counts.completed }}</td><td>{{ summary.counts.failed }}</td>
<td>{{ m.num(summary.counts.coverage, 3) }}</td><td>{{ m.num(summary.primary.reward_mean) }}</td><td>{{ m.num(summary.primary.reward_sem) }}</td>
<td>{{ m.num(summary.primary.success_rate) }}</td><td>{{ m.num(summary.behavior.steps_mean) }}</td>
<td>{{ m.num(summary.behavior.protocol_error_rate) }}</td><td>{{ m.num(summary.behavior.invalid_action_rate) }}</td></tr></table>
{% if design %}<h2>Intervals and sampling design</h2>
<p id="design">{% if design.clustered %}Sampling unit: <b>task</b> · <span id="design-units">{{ design.tasks }} tasks × {{ design.repeats }}</span> ({{ design.episodes }} episodes): the intervals resample tasks, keeping each task's repeats together · design effect success {{ m.fixed(design.design_effect.success, 2) }}, reward {{ m.fixed(design.design_effect.reward, 2) }}{% if design.reward_sem_cluster is number %} · task-level reward SEM {{ m.num(design.reward_sem_cluster) }}{% endif %}
{% else %}One episode per task: the <span id="design-units">{{ design.episodes }} episodes</span> are the sampling units.{% endif %}</p>
<table id="intervals"><tr><th>metric</th><th>estimate</th><th>95% interval</th><th>method</th><th>units</th><th>design effect</th><th>effective n</th></tr>
{% for r in design.rows %}<tr><td>{{ r.metric }}</td><td>{{ m.fixed(r.estimate) }}</td><td>{{ m.ci(r.low, r.high) }}</td><td><code>{{ r.method or '–' }}</code></td><td>{{ r.units }}</td>
<td>{{ m.fixed(r.design_effect, 2) }}{% if r.design_effect_used is number and r.design_effect_used != r.design_effect %} (interval uses {{ m.fixed(r.design_effect_used, 2) }}){% endif %}</td><td>{{ m.fixed(r.effective_n, 1) }}</td></tr>{% endfor %}</table>
{% if design.categories %}<table id="categories"><tr><th>category</th><th>tasks</th><th>episodes</th><th>success rate</th><th>95% interval</th><th>reward mean</th><th>95% interval</th><th>methods</th><th></th></tr>
{% for c in design.categories %}<tr><td>{{ c.name }}</td><td>{{ c.tasks }}</td><td>{{ c.episodes }}</td><td>{{ m.fixed(c.success) }}</td><td>{{ m.ci(c.success_low, c.success_high) }}</td>
<td>{{ m.fixed(c.reward) }}</td><td>{{ m.ci(c.reward_low, c.reward_high) }}</td><td class="muted">{{ c.methods }}</td><td>{% if c.small_n %}<span class="tag bad small-n" title="fewer than 10 sampling units: a rough range">small n</span>{% endif %}</td></tr>{% endfor %}</table>{% endif %}
{% endif %}
{% if summary.behavior.termination_reasons %}<p>Termination: {% for k, v in summary.behavior.termination_reasons.items() %}<span class="tag">{{ k }} {{ v }}</span>{% endfor %}</p>{% endif %}
{% if summary.errors %}<p>Errors: {% for k, v in summary.errors.items() %}<span class="tag bad">{{ k }} {{ v }}</span>{% endfor %}</p>{% endif %}
{% elif not too_large %}<p class="muted">No summary.json yet.</p>{% endif %}
{% if metrics %}<table id="episode-metrics"><tr><th>episode metric</th><th>mean</th><th>min</th><th>max</th><th>episodes</th></tr>
{% for x in metrics %}<tr><td title="{{ x.description }}">{{ x.label }}</td><td>{{ m.num(x.mean) }}</td><td>{{ m.num(x.min) }}</td><td>{{ m.num(x.max) }}</td><td>{{ x.episodes }}</td></tr>{% endfor %}</table>{% endif %}
{% if label_counts %}<p>Labels: {% for k, v in label_counts %}<a class="tag{{ ' ok' if k == 'success' else ' bad' }}" href="{{ run_href }}/label/{{ k|urlencode }}">{{ k }} {{ v }}</a>{% endfor %}</p>{% endif %}
<h2>Episodes</h2>
<form class="filters" method="get" action="{{ run_href }}">
<label>status <select name="status">{% for v in ['', 'completed', 'failed'] %}<option value="{{ v }}"{% if f.status == v %} selected{% endif %}>{{ v or 'any' }}</option>{% endfor %}</select></label>
<label>success <select name="success">{% for v, t in [('', 'any'), ('yes', 'success'), ('no', 'failure')] %}<option value="{{ v }}"{% if f.success == v %} selected{% endif %}>{{ t }}</option>{% endfor %}</select></label>
<label>reward ≥ <input type="number" step="any" name="reward_min" value="{{ f.reward_min }}"></label>
<label>≤ <input type="number" step="any" name="reward_max" value="{{ f.reward_max }}"></label>
<label>termination <select name="termination"><option value="">any</option>{% for v in choices.termination %}<option value="{{ v }}"{% if f.termination == v %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
{% if choices.label %}<label>label <select name="label"><option value="">any</option>{% for v in choices.label %}<option value="{{ v }}"{% if f.label == v %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>{% endif %}
<label>category <select name="category"><option value="">any</option>{% for v in choices.category %}<option value="{{ v }}"{% if f.category == v %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
<label>steps <input type="number" name="steps_min" value="{{ f.steps_min }}"> – <input type="number" name="steps_max" value="{{ f.steps_max }}"></label>
<label>protocol errors <select name="protocol">{% for v, t in [('', 'any'), ('none', 'none'), ('some', '≥ 1')] %}<option value="{{ v }}"{% if f.protocol == v %} selected{% endif %}>{{ t }}</option>{% endfor %}</select></label>
<label>sort <select name="sort">{% for v in sorts %}<option value="{{ v }}"{% if f.sort == v %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
<label><select name="order">{% for v in ['asc', 'desc'] %}<option value="{{ v }}"{% if f.order == v %} selected{% endif %}>{{ v }}</option>{% endfor %}</select></label>
<label>per page <input type="number" name="per" value="{{ f.per }}" min="1" max="500"></label>
<button type="submit" id="apply">apply</button> <a href="{{ run_href }}">reset</a></form>
<p id="matches">{{ total }} of {{ n_episodes }} episodes match · page {{ page }} of {{ pages }}
{% if prev_href %}<a href="{{ prev_href }}">« previous</a>{% endif %} {% if next_href %}<a href="{{ next_href }}">next »</a>{% endif %}</p>
<table id="episodes"><tr>{% for c in columns %}<th>{{ c }}</th>{% endfor %}{% for x in metric_columns %}<th>{{ x.label }}</th>{% endfor %}</tr>
{% for e in rows %}<tr>
<td><a class="episode" href="{{ e.href }}">{{ e.episode_id }}</a></td><td>{{ e.task_id }}</td><td>{{ e.sample_id }}</td>
<td class="{{ 'ok' if e.complete else 'bad' }}">{{ e.status }}</td><td>{{ m.num(e.reward) }}</td>
<td>{% if e.r_success is none %}–{% elif e.r_success >= 1 %}<span class="ok">yes</span>{% else %}<span class="bad">no</span>{% endif %}</td>
<td>{{ e.termination_reason or e.error_type or '' }}</td><td>{{ e.category or '' }}</td><td>{{ e.n_steps }}</td>
<td>{{ e.protocol_errors }}</td><td>{{ e.invalid_actions }}</td><td>{{ e.attempts }}</td><td>{{ m.num(e.duration_ms, 5) }}</td>
<td>{{ e.outcome or '' }}</td>{% for x in metric_columns %}<td>{{ m.num(e[x.column]) }}</td>{% endfor %}</tr>{% endfor %}</table>
{% endblock %}"""

_EPISODE = """{% extends "base" %}{% import "macros" as m %}
{% block title %}{{ eid }}{% endblock %}
{% block nav %}<a href="{{ run_href }}">{{ rel }}</a><a href="{{ self_href }}">{{ eid }}</a>{% endblock %}
{% block body %}
<h1>Episode <code>{{ eid }}</code></h1>
<p>run <a href="{{ run_href }}">{{ rel }}</a> · task {{ job.task_id }} · sample {{ job.sample_id }} · split {{ job.split }} · seed {{ job.seed }}
· attempt {{ attempt.number }} · status <b class="{{ 'ok' if complete else 'bad' }}">{{ status }}</b> · checkpoint {{ checkpoint }}</p>
<p>duration {{ m.num(duration_ms, 6) }} ms{% if timing %} · reset {{ m.num(timing.reset_ms, 5) }} · model {{ m.num(timing.model_ms, 5) }} · env {{ m.num(timing.env_ms, 5) }} · harness {{ m.num(timing.harness_ms, 5) }} · cleanup {{ m.num(timing.cleanup_ms, 5) }} ms{% endif %}</p>
{% if compare_links %}<p>Same task in: {% for c in compare_links %}<a href="{{ c.href }}">{{ c.rel }}</a> {% endfor %}</p>{% endif %}
{% if error %}<div class="step bad" id="error"><b>error</b> at {{ error.stage }}: {{ error.type }} — {{ error.message }}
{% if error.traceback %}<details><summary>traceback</summary>{{ m.pre(error.traceback) }}</details>{% endif %}</div>{% endif %}
<details id="system"><summary>system prompt{% if skills %} and {{ skills|length }} injected skill(s){% endif %}</summary>
{{ m.pre(system_prompt) }}
{% for s in skills %}<h4>skill {{ s.skill_id }} ({{ s.version }})</h4>{{ m.pre(s.content) }}{% endfor %}
</details>
{% if persona %}<details id="persona"><summary>user persona</summary>{{ m.pre(persona) }}</details>{% endif %}
{% if task_instruction %}<p>Task: <b>{{ task_instruction }}</b></p>{% endif %}
<h2>Steps ({{ steps|length }})</h2>
{% for s in steps %}<div class="step" id="step-{{ s.step_index }}">
<h3>Step {{ s.step_index }}{% if s.action %} · <code>{{ s.action }}</code>{% endif %}
{% if s.protocol_error %} · <span class="bad">protocol error {{ s.protocol_error.code }}</span>{% endif %}
{% if s.policy_failure %} · <span class="bad">policy failure {{ s.policy_failure.code }}</span>{% endif %}</h3>
<details><summary>observation ({{ s.observation|length }} chars)</summary>{{ m.pre(s.observation) }}</details>
{% if s.reasoning %}<details class="reasoning"><summary>reasoning</summary>{{ m.pre(s.reasoning) }}</details>{% endif %}
{% if s.content %}<p>content: </p>{{ m.pre(s.content) }}{% endif %}
{% for c in s.tool_calls %}<p>tool call <b>{{ c.name }}</b> <code>{{ c.arguments }}</code></p>{% endfor %}
{% if s.action %}<p>canonical action <code class="action">{{ s.action }}</code></p>{% endif %}
{% if s.feedback %}<p>environment feedback: <span class="{{ 'ok' if s.feedback.valid else 'bad' }}">{{ 'valid' if s.feedback.valid else 'invalid' }}</span> · {{ s.feedback.reason }} · {{ s.feedback.message }}</p>{% endif %}
{% if s.protocol_error %}<p class="bad">{{ s.protocol_error.code }}: {{ s.protocol_error.message }}</p>
{% if s.protocol_feedback %}<details open><summary>repair turn sent to the model</summary>{{ m.pre(s.protocol_feedback) }}</details>{% endif %}{% endif %}
{% if s.policy_failure %}<p class="bad">{{ s.policy_failure.code }}: {{ s.policy_failure.message }}</p>{% endif %}
<p class="muted">{% if s.timing %}model {{ m.num(s.timing.model_ms, 5) }} ms · env {{ m.num(s.timing.env_ms, 5) }} ms · harness {{ m.num(s.timing.harness_ms, 5) }} ms{% endif %}
{% if s.usage %} · tokens {{ s.usage.prompt_tokens }} in / {{ s.usage.completion_tokens }} out{% endif %}{% if s.finish_reason %} · finish {{ s.finish_reason }}{% endif %}</p>
</div>{% endfor %}
<h2 id="reward">Final reward</h2>
{% if final %}<p>reward <b id="reward-value">{{ m.num(final.reward) }}</b> · termination {{ final.termination_reason }}</p>
<table id="reward-detail"><tr><th>key</th><th>value</th></tr>{% for k, v in reward_detail %}<tr><td>{{ k }}</td><td>{{ v }}</td></tr>{% endfor %}</table>
<h3>Purchase against the goal</h3>
<div class="cols"><div><h4>purchase</h4>{{ m.pre(purchase) }}</div>
<div class="private" id="goal"><h4>goal — PRIVATE, shown after the fact (the agent never saw it)</h4>{{ m.pre(goal) }}</div></div>
{% else %}<p class="muted">No final state (the attempt failed before the episode ended).</p>{% endif %}
{% endblock %}"""

_COMPARE_TASK = """{% extends "base" %}{% import "macros" as m %}
{% block title %}task {{ task }}{% endblock %}
{% block body %}
<h1>Task {{ task }}: <code>{{ a.rel }}</code> vs <code>{{ b.rel }}</code></h1>
<p><a href="{{ checkpoint_href }}">checkpoint comparison</a></p>
<div class="cols">{% for side in [a, b] %}<div><h2><a href="{{ side.run_href }}">{{ side.rel }}</a> ({{ side.checkpoint }})</h2>
{% if not side.episodes %}<p class="muted">no episode of this task</p>{% endif %}
{% for e in side.episodes %}<div class="step"><h3><a href="{{ e.href }}">{{ e.eid }}</a> · reward {{ m.num(e.reward) }} · {{ e.termination or e.status }}</h3>
<ol>{% for s in e.steps %}<li><code>{{ s.action or '—' }}</code>{% if s.protocol_error %} <span class="bad">{{ s.protocol_error }}</span>{% endif %}{% if s.feedback %} <span class="{{ 'ok' if s.valid else 'bad' }}">{{ s.feedback }}</span>{% endif %}
{% if s.reasoning %}<details><summary>reasoning</summary>{{ m.pre(s.reasoning) }}</details>{% endif %}</li>{% endfor %}</ol></div>{% endfor %}
</div>{% endfor %}</div>
{% endblock %}"""

_COMPARE = """{% extends "base" %}{% import "macros" as m %}
{% block title %}compare{% endblock %}
{% block body %}
<h1>Checkpoint comparison: <code>{{ a.rel }}</code> → <code>{{ b.rel }}</code></h1>
<table id="headline"><tr><th></th><th>checkpoint</th><th>episodes</th><th>reward mean</th><th>success rate</th></tr>
{% for side in [a, b] %}<tr><td><a href="{{ side.run_href }}">{{ side.rel }}</a></td><td>{{ side.checkpoint }}</td><td>{{ side.n }}</td><td>{{ m.num(side.reward_mean) }}</td><td>{{ m.num(side.success_rate) }}</td></tr>{% endfor %}</table>
<h2>Paired difference B − A, per task</h2>
{% if stats.error %}<p class="bad" id="comparison-error">{{ stats.error }}</p>{% else %}
<p id="comparison-source">{{ stats.pairs }} paired tasks ({{ stats.paired_episodes }} episodes) · {{ stats.source }}{% if stats.created_at %} · {{ stats.created_at }}{% endif %}{% if stats.power %} · minimum detectable difference (MDE) at {{ m.num(stats.power.power) }} power, α {{ m.num(stats.power.alpha) }} ({{ stats.power.method }}){% endif %}</p>
{% if stats.differences %}<p class="bad" id="comparison-differences">the two plans differ ({{ stats.differences|join(', ') }}): these differences are not the checkpoints' alone</p>{% endif %}
{% macro metric_row(r) -%}<tr class="metric"><td>{{ r.metric }}</td><td>{{ m.fixed(r.a_mean) }}</td><td>{{ m.fixed(r.b_mean) }}</td><td class="delta">{{ m.signed(r.delta) }}</td><td>{{ m.ci(r.low, r.high, 3, True) }}</td>
<td>{{ m.fixed(r.sd_difference) }}</td><td class="mde">{{ m.fixed(r.mde) }}</td>
<td class="verdict">{% if r.within_noise is none %}<span class="muted">no interval</span>{% elif r.within_noise %}<span class="muted within-noise">within noise</span>{% if r.delta is number and r.mde is number %}: |Δ| {{ m.fixed(r.delta|abs) }} {{ '<' if r.delta|abs < r.mde else '≥' }} MDE {{ m.fixed(r.mde) }}{% endif %}{% else %}<b class="detected">detected</b>: the interval excludes 0{% endif %}</td>
<td>{% if r.between_task is number or r.within_task is number %}{{ m.num(r.between_task) }} / {{ m.num(r.within_task) }} ({{ m.num(r.repeats) }} repeats){% else %}<span class="muted">–</span>{% endif %}</td></tr>{%- endmacro %}
{% set header %}<tr><th>metric</th><th>A</th><th>B</th><th>Δ (B − A)</th><th>95% interval</th><th>SD of Δ</th><th>MDE</th><th>verdict</th><th>variance between / within task</th></tr>{% endset %}
<table id="paired-metrics">{{ header }}{% for r in stats.metrics if r.headline %}{{ metric_row(r) }}{% endfor %}</table>
{% if stats.metrics|rejectattr('headline')|list %}<details><summary>all metrics</summary><table id="all-metrics">{{ header }}{% for r in stats.metrics if not r.headline %}{{ metric_row(r) }}{% endfor %}</table></details>{% endif %}
{% endif %}
<p>{{ paired }} paired episodes · gained {{ counts.gained }} · lost {{ counts.lost }} · both success {{ both }} · both failure {{ neither }}{% if counts.gained > shown_max or counts.lost > shown_max %} (first {{ shown_max }} of each listed){% endif %}</p>
{% for title, items, ident in [('Gained (failure in A, success in B)', gained, 'gained'), ('Lost (success in A, failure in B)', lost, 'lost')] %}
<h2>{{ title }}</h2><table id="{{ ident }}"><tr><th>task</th><th>sample</th><th>A</th><th>B</th><th>side by side</th></tr>
{% for g in items %}<tr><td>{{ g.task_id }}</td><td>{{ g.sample_id }}</td><td><a href="{{ g.a_href }}">{{ g.eid }}</a> ({{ m.num(g.a_reward) }})</td>
<td><a href="{{ g.b_href }}">{{ g.eid }}</a> ({{ m.num(g.b_reward) }})</td><td><a class="task-compare" href="{{ g.task_href }}">task {{ g.task_id }}</a></td></tr>{% endfor %}</table>
{% endfor %}
{% endblock %}"""

_LABEL = """{% extends "base" %}{% import "macros" as m %}
{% block title %}{{ label }}{% endblock %}
{% block nav %}<a href="{{ run_href }}">{{ rel }}</a>{% endblock %}
{% block body %}
<h1>Label <code>{{ label }}</code> in <a href="{{ run_href }}">{{ rel }}</a></h1>
<p>{{ rows|length }} episode(s)</p>
<table id="label-episodes"><tr><th>episode</th><th>task</th><th>outcome</th><th>labels</th><th>reward</th><th>evidence steps</th></tr>
{% for r in rows %}<tr><td><a href="{{ r.href }}">{{ r.episode_id }}</a></td><td>{{ r.task_id }}</td><td>{{ r.outcome }}</td>
<td>{% for l in r.labels %}<span class="tag">{{ l }}</span>{% endfor %}</td><td>{{ m.num(r.reward) }}</td>
<td>{% for s in r.steps %}<a href="{{ r.href }}#step-{{ s }}">{{ s }}</a> {% endfor %}</td></tr>{% endfor %}</table>
{% endblock %}"""

_SKILLBANK = """{% extends "base" %}{% import "macros" as m %}
{% block title %}SkillBank{% endblock %}
{% block body %}
<h1>SkillBank <code>{{ path }}</code></h1>
<p>bank_version {{ bank_version }} · {{ skills|length }} skill(s){% if run_rel %} · evidence links into <a href="{{ run_href }}">{{ run_rel }}</a>{% endif %}</p>
{% if gate %}<p id="gate">{{ gate.gate }} selection rule <code>{{ gate.selection_rule or '–' }}</code>{% if gate.source %} · sign-flip noise bar {{ m.fixed(gate.noise_bar, 4) }} (the largest |β| no effect produces, 95%) · from <code>{{ gate.source }}</code>{% else %} · <span class="muted">the {{ gate.gate }} contributions of this bank are not under the roots: no noise verdicts</span>{% endif %}</p>{% endif %}
{% for s in skills %}<div class="step" id="skill-{{ loop.index }}"><h3>{{ s.skill_id }} <span class="muted">{{ s.version }}</span>{% if not s.enabled %} <span class="bad">disabled</span>{% endif %}
{% if s.noise and s.noise.within_noise %} <span class="tag bad within-noise" title="|β| is at most the noise bar: indistinguishable from no effect">within noise</span>{% elif s.noise and s.noise.within_noise is false %} <span class="tag ok above-noise">above noise bar</span>{% endif %}</h3>
{% if s.effect is number %}<p class="gate-estimate">{{ gate.gate if gate else 'gate' }} β {{ m.signed(s.effect, 4) }} {{ m.ci(s.low, s.high, 4, True) }}{% if s.noise and s.noise.adjusted_p is number %} · adjusted p {{ m.fixed(s.noise.adjusted_p, 3) }}{% endif %}</p>{% endif %}
{{ m.pre(s.content) }}
{% if s.evidence %}<p>evidence episodes:</p><ul>{% for e in s.evidence %}<li>{% if e.href %}<a href="{{ e.href }}">{{ e.episode_id }}</a>{% else %}{{ e.episode_id }}{% endif %}
{% if e.step_index %} step {{ e.step_index }}{% endif %} {% if e.role %}<span class="tag">{{ e.role }}</span>{% endif %} {{ e.label or '' }}</li>{% endfor %}</ul>
{% else %}<p class="muted">no evidence episodes recorded{% if s.clusters %} (clusters: {{ s.clusters|join(', ') }}){% endif %}</p>{% endif %}
<details><summary>metadata</summary>{{ m.pre(s.metadata) }}</details></div>{% endfor %}
{% endblock %}"""

_ROUND = """{% extends "base" %}{% import "macros" as m %}
{% block title %}round {{ rel }}{% endblock %}
{% block nav %}<a href="{{ run_href }}">episodes of {{ rel }}</a>{% endblock %}
{% block body %}<h1>Training round <code>{{ rel }}</code></h1>
<p id="round-classes">{{ groups|length }} group(s){% for name, n in classes.items() %} · <span class="tag">{{ name }}</span> {{ n }}{% endfor %}</p>
{% for line in unreadable %}<p class="bad">{{ line }}</p>{% endfor %}
<table id="round-groups"><tr><th>group</th><th>task</th><th>assignment</th><th>samples: reward (success)</th><th>diagnostic retry (every active skill)</th><th>classification</th></tr>
{% for g in groups %}<tr class="group" data-group="{{ g.group_key }}"><td>{{ g.group_key }}</td><td>{{ g.task_id }}</td><td>{{ g.mode }}{% if g.chunks %}<br><span class="muted">{{ g.chunks|join(', ') }}</span>{% endif %}</td>
<td>{% for s in g.members %}<a href="{{ s.href }}">#{{ s.sample }}</a> {% if s.scored %}{{ m.fixed(s.reward) }}{% if s.success %} <span class="ok">✓</span>{% endif %}{% else %}<span class="bad">not scored</span>{% endif %}{% if not loop.last %} · {% endif %}{% endfor %}</td>
<td>{% if g.retry %}<a href="{{ g.retry.href }}">retry</a> {{ m.fixed(g.retry.reward) }}{% if g.retry.success %} <span class="ok">✓</span>{% endif %}<br><span class="muted">{{ g.retry.chunks|join(', ') }}</span>{% else %}<span class="muted">none</span>{% endif %}</td>
<td><span class="tag{% if g.pending %} bad{% endif %}">{{ g.classification }}</span></td></tr>{% endfor %}
</table>{% endblock %}"""

_ERROR = """{% extends "base" %}
{% block title %}{{ title }}{% endblock %}
{% block body %}<h1>{{ title }}</h1><p id="error-message">{{ message }}</p>{% endblock %}"""


def environment() -> Any:
    """A Jinja2 environment with autoescape on for every template (never ``select_autoescape``)."""
    from jinja2 import DictLoader, Environment

    env = Environment(
        loader=DictLoader({"base": _BASE, "macros": _MACROS, "runs": _RUNS, "run": _RUN, "episode": _EPISODE,
                           "compare_task": _COMPARE_TASK, "compare": _COMPARE, "label": _LABEL,
                           "skillbank": _SKILLBANK, "round": _ROUND, "error": _ERROR}),
        autoescape=True,
    )
    return env
