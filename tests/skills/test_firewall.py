from testkit.tracegen import BRAND, GOLD_ASIN, GOLD_OPTION, GOLD_TITLE, make_trace

from shopsimrl_core.skills._firewall import check_text, context_from_traces, redact_identifiers


def _ctx():
    return context_from_traces([make_trace(3), make_trace(4, outcome="wrong_option")])


def codes(text, ctx=None):
    return [f.code for f in check_text(text, ctx)]


def test_clean_text_passes():
    assert codes("### 逐项核对规格\n\n- Applies when: 详情页有规格轴", _ctx()) == []


def test_product_id_rejected():
    assert "contains_long_identifier" in codes(f"点击 {GOLD_ASIN} 即可", _ctx())
    assert "mentions_asin" in codes("check the ASIN first")
    assert "contains_task_id" in codes("as in task-19")


def test_short_product_id_from_traces_rejected():
    rec = make_trace(3)
    rec["steps"][0]["environment"]["observation_state"]["products"][0]["asin"] = "P-7781"
    ctx = context_from_traces([rec])
    assert codes("buy P-7781 now", ctx) == ["contains_product_id"]
    assert codes("buy P-77812 now", ctx) == []  # only the whole id counts


def test_title_brand_and_gold_option_rejected():
    ctx = _ctx()
    assert codes(f"优先选择{GOLD_TITLE}", ctx) == ["copies_instance_product_title"]
    assert codes(f"去{BRAND}买", ctx) == ["copies_instance_brand"]
    assert codes(f"颜色选{GOLD_OPTION}", ctx) == ["copies_gold_option"]


def test_redaction_of_identifiers():
    assert redact_identifiers("ASIN: B00X12 and 640099999999 in task_12") == \
        "product id: <redacted> and <product_id> in <task_id>"
