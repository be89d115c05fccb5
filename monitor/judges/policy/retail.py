"""The retail rule set, written from the tau2-bench retail policy (pure; no I/O imports).

Every ``clause`` is a sentence of ``domain_data/retail/policy.md`` (a test checks it). The
conditions read the tau2 retail tools' outputs: ``get_order_details`` (status, items with their
``product_id``, ``payment_history``, ``user_id``), ``get_user_details`` (payment methods, gift
card balances) and ``get_product_details`` (variants, availability).

Rules (id: the call it guards -> what it checks):

- ``retail.cancel.pending``: ``cancel_pending_order`` -> the order is ``pending``.
- ``retail.cancel.reason``: ``cancel_pending_order`` -> the reason is "no longer needed" or
  "ordered by mistake".
- ``retail.modify.pending``: ``modify_pending_order_*`` -> the order is ``pending``; an address
  change may also follow an item change ("pending (item modified)": tau2's tools and tasks
  allow it).
- ``retail.return.delivered`` / ``retail.exchange.delivered``: the order is ``delivered``.
- ``retail.items.once``: ``modify_pending_order_items``, ``exchange_delivered_order_items`` ->
  not called before (successfully) for the same order.
- ``retail.item.same_product``: the same two tools -> each new item is an available variant of
  the old item's product, and a different one.
- ``retail.payment.in_profile``: every call with ``payment_method_id`` -> in the profile.
- ``retail.return.refund_method``: ``return_delivered_order_items`` -> the original payment
  method or a gift card.
- ``retail.payment.change``: ``modify_pending_order_payment`` -> a method other than the
  original one; a gift card covers the order total.

A status rule broken because this conversation's own earlier write gave the order its status
(``WRITTEN_STATUSES``: returned, exchanged, item-modified, cancelled), and a second item change,
are ``by_own_write`` (:class:`~monitor.judges.policy.rule.Check`): judged even when the tool
refuses the call.

Opt-in rules (``default=False``: on tau2 runs their flags do not predict a failed run; see
docs/benchmarks.md):

- ``retail.authentication``: every database update -> the user was located by email or by
  name + zip first (``find_user_id_by_*`` succeeded earlier; no earlier call at all -> the
  history is not known: not applicable).
- ``retail.confirmation``: every database update -> an explicit yes just before.
- ``retail.one_action``: every database update -> the only tool call of its message.
"""

from __future__ import annotations

from typing import Any

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.policy.common import (
    confirmed_before,
    one_action_per_turn,
    payment_in_profile,
    payment_source,
    the_user,
)
from monitor.judges.policy.facts import Facts, Known
from monitor.judges.policy.rule import Check, Evidence, Rule

DOMAIN = "retail"
POLICY = "domain_data/retail/policy.md"
MODIFY = frozenset(
    {"modify_pending_order_address", "modify_pending_order_items", "modify_pending_order_payment"}
)
ITEM_CHANGES = frozenset({"modify_pending_order_items", "exchange_delivered_order_items"})
WRITES = MODIFY | {
    "cancel_pending_order",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
    "modify_user_address",
}
PAYING = MODIFY | {"return_delivered_order_items", "exchange_delivered_order_items"}
CANCEL_REASONS = ("no longer needed", "ordered by mistake")
AUTH_TOOLS = ("find_user_id_by_email", "find_user_id_by_name_zip")
#: the statuses a write gives an order (cancel, return, exchange, item change)
WRITTEN_STATUSES = frozenset(
    {"cancelled", "return requested", "exchange requested", "pending (item modified)"}
)


def _order(facts: Facts, call: ToolCall) -> Known | None:
    return facts.get("order", call.arguments.get("order_id"))


def _order_ev(order: Known) -> Evidence:
    v = order.value
    items = ", ".join(
        f"{i.get('name')} {i.get('item_id')}" for i in v.get("items") or [] if isinstance(i, dict)
    )
    paid = ", ".join(
        f"{p.get('payment_method_id')} ${p.get('amount')}"
        for p in v.get("payment_history") or []
        if isinstance(p, dict)
    )
    return Evidence.of(
        order.event,
        f"order {v.get('order_id')}: status {v.get('status')}, items {items}, paid {paid}",
    )


def _status_is(wanted: str, action: str, also: dict[str, str] | None = None) -> Any:
    """The order's status is ``wanted`` (or, for a tool in ``also``, that tool's extra status)."""

    def check(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
        order = _order(facts, call)
        if order is None:
            return Check.skip("no order details before the call")
        status = order.value.get("status")
        if status != wanted and status != (also or {}).get(call.name):
            tr = order.event.tool_result
            own = tr is not None and tr.name in WRITES and status in WRITTEN_STATUSES
            how = f" (after this conversation's {tr.name})" if own and tr else ""
            return Check.failed(
                f"{action} an order whose status is {status!r}{how}",
                _order_ev(order),
                by_own_write=own,
            )
        return Check.passed(f"status {status}", _order_ev(order))

    return check


def cancel_reason(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    reason = call.arguments.get("reason")
    if not isinstance(reason, str):
        return Check.skip("no reason in the call")
    if reason.strip().lower() not in CANCEL_REASONS:
        return Check.failed(f"cancels with the reason {reason!r}")
    return Check.passed(f"reason {reason!r}")


def items_once(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    order_id = call.arguments.get("order_id")
    if order_id is None:
        return Check.skip("no order id")
    for _, earlier, result in facts.succeeded(call.name):
        if earlier.arguments.get("order_id") == order_id:
            return Check.failed(
                f"calls {call.name} a second time for order {order_id}",
                Evidence.of(
                    result, (result.tool_result.content or "") if result.tool_result else ""
                ),
                by_own_write=True,
            )
    return Check.passed("first item change of the order")


def _variant(facts: Facts, item_id: str) -> tuple[Known, dict[str, Any]] | None:
    for product in facts.all("product"):
        variants = product.value.get("variants") or {}
        found = variants.get(item_id) if isinstance(variants, dict) else None
        if isinstance(found, dict):
            return product, found
    return None


def same_product(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    order = _order(facts, call)
    old, new = call.arguments.get("item_ids"), call.arguments.get("new_item_ids")
    if order is None or not isinstance(old, list) or not isinstance(new, list):
        return Check.skip("no order details or item lists")
    if len(old) != len(new):
        return Check.failed(f"{len(old)} items for {len(new)} new items", _order_ev(order))
    products = {
        str(i.get("item_id")): str(i.get("product_id"))
        for i in order.value.get("items") or []
        if isinstance(i, dict)
    }
    checked = 0
    for before, after in zip(old, new, strict=True):
        found = _variant(facts, str(after))
        if found is None or str(before) not in products:
            continue
        product, variant = found
        checked += 1
        ev = Evidence.of(
            product.event,
            f"product {product.value.get('product_id')} variant "
            f"{after}: available {variant.get('available')}",
        )
        if str(product.value.get("product_id")) != products[str(before)]:
            return Check.failed(
                f"item {before} (product {products[str(before)]}) becomes "
                f"{after} of product {product.value.get('product_id')}",
                _order_ev(order),
                ev,
            )
        if str(before) == str(after):
            return Check.failed(f"item {before} is 'changed' to itself", _order_ev(order))
        if variant.get("available") is False:
            return Check.failed(f"new item {after} is not available", ev)
    if not checked:
        return Check.skip("no product details for the new items")
    return Check.passed(f"{checked} item(s): same product, available", _order_ev(order))


def retail_payment_in_profile(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    pid = call.arguments.get("payment_method_id")
    if not isinstance(pid, str) or not pid:
        return Check.skip("no payment method in the call")
    order = _order(facts, call)
    user = the_user(facts, order.value.get("user_id") if order else None)
    return payment_in_profile(user, [pid])


def _original(order: Known) -> str | None:
    for p in order.value.get("payment_history") or []:
        if isinstance(p, dict) and p.get("transaction_type", "payment") == "payment":
            pid = p.get("payment_method_id")
            return str(pid) if pid else None
    return None


def _payment_named(call: ToolCall, facts: Facts) -> tuple[Known, str, str] | None:
    """The order a call is about, the payment method it names and the order's original one;
    None when any of them is unknown."""
    order = _order(facts, call)
    pid = call.arguments.get("payment_method_id")
    original = _original(order) if order else None
    if order is None or not isinstance(pid, str) or original is None:
        return None
    return order, pid, original


def refund_method(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    found = _payment_named(call, facts)
    if found is None:
        return Check.skip("no order details or payment method")
    order, pid, original = found
    user = the_user(facts, order.value.get("user_id"))
    if pid == original or payment_source(user, pid) == "gift_card":
        return Check.passed(f"refund to {pid}", _order_ev(order))
    return Check.failed(
        f"refunds to {pid}: neither the original method {original} nor a gift card",
        _order_ev(order),
    )


def payment_change(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    found = _payment_named(call, facts)
    if found is None:
        return Check.skip("no order details or payment method")
    order, pid, original = found
    if pid == original:
        return Check.failed(f"'changes' the payment to the original method {pid}", _order_ev(order))
    user = the_user(facts, order.value.get("user_id"))
    method = ((user.value.get("payment_methods") or {}) if user else {}).get(pid)
    if payment_source(user, pid) == "gift_card" and isinstance(method, dict) and user:
        balance = method.get("balance")
        total = sum(
            float(p.get("amount") or 0)
            for p in order.value.get("payment_history") or []
            if isinstance(p, dict) and p.get("transaction_type", "payment") == "payment"
        )
        if isinstance(balance, int | float) and balance < total:
            return Check.failed(
                f"gift card {pid} has ${balance:g}, the order is ${total:g}",
                _order_ev(order),
                Evidence.of(user.event, f"{pid}: {method}"),
            )
    return Check.passed(f"{original} -> {pid}", _order_ev(order))


def authenticated(call: ToolCall, message: AgentEvent, facts: Facts) -> Check:
    if not facts.calls:
        return Check.skip("no earlier tool call: the history is not known")
    for tool in AUTH_TOOLS:
        found = facts.succeeded(tool)
        if found:
            result = found[0][2]
            tr = result.tool_result
            return Check.passed(
                f"located by {tool}", Evidence.of(result, (tr.content or "") if tr else "")
            )
    return Check.failed("updates the database for a user never located by email or name + zip")


def retail_rules(policy: str) -> list[Rule]:
    """The retail rules (``policy``: the policy text, for symmetry with the airline set)."""
    order, user, product = "get_order_details", "get_user_details", "get_product_details"
    return [
        Rule(
            "retail.cancel.pending",
            frozenset({"cancel_pending_order"}),
            (order,),
            "An order can only be cancelled if its status is 'pending', and you should check "
            "its status before taking the action.",
            _status_is("pending", "cancels"),
        ),
        Rule(
            "retail.cancel.reason",
            frozenset({"cancel_pending_order"}),
            (),
            "The user needs to confirm the order id and the reason (either 'no longer needed' "
            "or 'ordered by mistake') for cancellation.",
            cancel_reason,
            "wrong_arguments",
        ),
        Rule(
            "retail.modify.pending",
            MODIFY,
            (order,),
            "An order can only be modified if its status is 'pending', and you should check "
            "its status before taking the action.",
            _status_is(
                "pending",
                "modifies",
                {"modify_pending_order_address": "pending (item modified)"},
            ),
        ),
        Rule(
            "retail.return.delivered",
            frozenset({"return_delivered_order_items"}),
            (order,),
            "An order can only be returned if its status is 'delivered', and you should check "
            "its status before taking the action.",
            _status_is("delivered", "returns"),
        ),
        Rule(
            "retail.exchange.delivered",
            frozenset({"exchange_delivered_order_items"}),
            (order,),
            "An order can only be exchanged if its status is 'delivered', and you "
            "should check its status before taking the action.",
            _status_is("delivered", "exchanges"),
        ),
        Rule(
            "retail.items.once",
            ITEM_CHANGES,
            (),
            "Exchange or modify order tools can only be called once per order.",
            items_once,
        ),
        Rule(
            "retail.item.same_product",
            ITEM_CHANGES,
            (order, product),
            "each item can be modified to an available new item of the same product but of "
            "different product option.",
            same_product,
            "wrong_arguments",
        ),
        Rule(
            "retail.payment.in_profile",
            PAYING,
            (order, user),
            "The user must provide a payment method to pay or receive refund of the price "
            "difference.",
            retail_payment_in_profile,
            "wrong_arguments",
        ),
        Rule(
            "retail.return.refund_method",
            frozenset({"return_delivered_order_items"}),
            (order, user),
            "The refund must either go to the original payment method, or an existing gift card.",
            refund_method,
            "wrong_arguments",
        ),
        Rule(
            "retail.payment.change",
            frozenset({"modify_pending_order_payment"}),
            (order, user),
            "The user can only choose a single payment method different from "
            "the original payment method.",
            payment_change,
            "wrong_arguments",
        ),
        Rule(
            "retail.authentication",
            WRITES,
            AUTH_TOOLS,
            "At the beginning of the conversation, you have to authenticate the user identity "
            "by locating their user id via email, or via name + zip code.",
            authenticated,
            default=False,
        ),
        Rule(
            "retail.confirmation",
            WRITES,
            ("user turns",),
            "Before taking any action that updates the database (cancel, modify, return, "
            "exchange), you must list the action details and obtain explicit user "
            "confirmation (yes) to proceed.",
            confirmed_before,
            default=False,
        ),
        Rule(
            "retail.one_action",
            WRITES,
            (),
            "You should at most make one tool call at a time, and if you take a tool call, you "
            "should not respond to the user at the same time.",
            one_action_per_turn,
            "wrong_action",
            default=False,
        ),
    ]
