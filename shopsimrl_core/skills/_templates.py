"""The rule miner's templates: one project-written procedural chunk per mined failure label.

Chinese, addressed to the agent, free of instance data (ids, titles, brands, options) by
construction. ``RuleBasedMiner`` (``_candidates``) hashes them into its identity, so editing a
template changes the identity of every candidate it produces.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TEMPLATES", "GENERIC_INVALID", "GENERIC_PROTOCOL"]


def _t(title: str, stage: str, when: str, procedure: list[str], verify: str, avoid: str) -> dict[str, Any]:
    return {
        "title": title,
        "workflow_stage": stage,
        "applicable_when": when,
        "procedure": procedure,
        "verification": verify,
        "common_failure": avoid,
    }


# Project wording. Chinese because the environment and the default prompt are Chinese; no template
# mentions any product, brand, id or option value, so the firewall passes them by construction.
TEMPLATES: dict[str, dict[str, Any]] = {
    "outcome:wrong_option": _t(
        "逐项核对规格",
        "option_selection",
        "商品详情页有颜色、尺码等规格轴，且任务或用户资料提到了偏好",
        [
            "先读出任务和用户资料中对颜色、尺码、款式的要求",
            "对每个规格轴逐一点击与要求最接近的值，不要保留默认值",
            "全部选完后再看一遍已选规格，与要求逐项对照",
        ],
        "已选规格中的每一项都能在任务或用户资料中找到依据",
        "只选了一个轴或随手选第一个值就购买",
    ),
    "outcome:missing_attributes": _t(
        "购买前核对关键属性",
        "product_selection",
        "搜索结果中有多个相似商品，任务要求了材质、功能或规格等属性",
        ["把任务中的每个属性词列成清单", "在标题和关键属性中逐个寻找这些词", "缺少任一属性时返回结果页换一个商品"],
        "清单上的属性都出现在商品标题或关键属性中",
        "只看品类相符就购买，忽略材质或功能要求",
    ),
    "outcome:wrong_type": _t(
        "确认商品品类",
        "search",
        "搜索结果混有配件、相关用品或其他品类的商品",
        [
            "搜索词以商品类型的名词为主，再加一两个关键属性",
            "点开商品前先看类目路径是否就是所要的品类",
            "类目不符时不要购买，换更准确的搜索词",
        ],
        "商品类目路径与任务要买的东西属于同一品类",
        "买到配件或相近但不同类型的商品",
    ),
    "outcome:over_budget": _t(
        "购买前核验价格与预算",
        "purchase",
        "任务或用户资料给出了预算或价位偏好",
        ["从任务和用户资料中确定预算上限", "选完规格后查看页面显示的当前价格", "价格超过预算时换规格或换商品"],
        "当前选中规格的价格不高于预算",
        "只看列表价就购买，而所选规格更贵",
    ),
    "budget:ignored": _t(
        "预算是硬性约束",
        "product_selection",
        "用户资料或任务中有预算偏好，而候选商品价格差异较大",
        ["在结果页优先点开价格在预算内的商品", "比较两三个预算内的候选后再决定", "不要因为属性更多而接受超预算的商品"],
        "最终价格在预算之内",
        "为了更好的配置超出预算",
    ),
    "outcome:price_unverifiable": _t(
        "让价格确定下来再购买",
        "option_selection",
        "商品价格随规格变化，页面还没有显示确定的当前价格",
        ["依次选择会影响价格的规格", "确认页面出现了当前规格的确定价格", "价格仍不确定时换一个价格明确的商品"],
        "购买前页面显示了所选规格的确定价格",
        "在价格区间未确定时直接购买",
    ),
    "outcome:action_limit": _t(
        "在步数用完前完成购买",
        "search",
        "已经翻阅多页结果或反复进出商品页仍未决定",
        [
            "最多浏览两三页结果，记下最符合要求的候选",
            "选定候选后直接进入详情页完成规格选择",
            "剩余步数不多时购买当前最合适的候选",
        ],
        "在步数上限之前完成了购买",
        "无限翻页或来回比较直到步数耗尽",
    ),
    "outcome:generation_length": _t(
        "思考保持简短",
        "protocol",
        "需要在多个候选之间权衡，思考容易变长",
        ["只思考与当前页面决策相关的要点", "尽快给出一次工具调用", "不要在思考中逐条复述整个页面"],
        "每一轮都以恰好一次工具调用结束",
        "长篇推理导致输出被截断",
    ),
    "behaviour:first_buy_incomplete_options": _t(
        "购买前完成全部规格选择",
        "option_selection",
        "商品详情页仍提示需要选择规格",
        [
            "查看页面列出的仍需选择的规格轴",
            "为每个缺少的轴点击一个符合要求的值",
            "等页面显示规格已全部选择后再点击购买",
        ],
        "购买按钮出现在可点击值中",
        "规格未选全就点击购买",
    ),
    "invalid_action:incomplete_options": _t(
        "规格选全后购买按钮才会出现",
        "purchase",
        "想要购买但可点击值中没有购买按钮",
        ["对照缺少的规格轴逐个完成选择", "只在可点击值中出现购买按钮时才点击它"],
        "点击的购买按钮来自当前可点击值列表",
        "在按钮未出现时尝试购买",
    ),
    "behaviour:loop": _t(
        "避免来回跳转",
        "product_selection",
        "已经进出同一商品页或重复同一次搜索",
        ["记住已经看过并排除的商品", "回到结果页后选择一个没看过的候选", "同一个搜索词不要重复搜索，需要时换词"],
        "每次进入的商品页都是新的候选",
        "在同两个页面之间反复切换",
    ),
    "invalid_action:unavailable_action": _t(
        "逐字复制可点击值",
        "protocol",
        "需要点击按钮、商品或规格",
        ["只从当前页面的可点击值列表中选择", "原样复制该值，包括大小写和空格", "页面变化后重新读取可点击值"],
        "点击值与列表中的某一项完全一致",
        "凭记忆或改写后的文字点击",
    ),
    "invalid_action:already_selected": _t(
        "不要重复点击已选规格",
        "option_selection",
        "规格已经选中，页面仍停留在详情页",
        ["先查看已选规格", "只点击尚未选择或需要更改的规格轴"],
        "每次点击都改变了已选规格",
        "重复点击同一个已选值",
    ),
    "invalid_action:search_unavailable": _t(
        "只在首页搜索",
        "search",
        "想换搜索词但当前不在搜索首页",
        ["先点击返回搜索回到首页", "在首页输入新的搜索词"],
        "搜索只在提供搜索工具的页面发起",
        "在结果页或详情页直接搜索",
    ),
}
GENERIC_INVALID = _t(
    "动作格式保持规范",
    "protocol",
    "页面返回动作无效的提示",
    ["阅读页面给出的无效原因", "只使用当前提供的工具", "点击值原样复制，搜索词简洁且非空"],
    "下一步动作被页面执行",
    "重复同一个无效动作",
)
GENERIC_PROTOCOL = _t(
    "每轮只调用一个工具",
    "protocol",
    "需要执行任何动作",
    ["在思考中完成推理，正文不输出文字", "每轮恰好调用一个当前提供的工具", "参数严格按照工具说明填写"],
    "回复中只有一次工具调用而没有正文",
    "在工具调用旁输出说明文字或一次调用多个工具",
)
