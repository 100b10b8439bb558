"""The co-scheduler's policies on hand-made situations: pure data in, decisions out."""

from __future__ import annotations

from dataclasses import replace

from harness.cosched_policies import LAS, TTL, Cap
from harness.coscheduler import EARLY, FCFS, INTERACTIVE_PRIORITY, RECHECK, Decision, Pacing, Progress, Ticket, View
from harness.engine.api import EngineLoad
from harness.speculation.running.observation import WARM_PRIORITY

PACING = Pacing(knee=2, kv_tokens=10_000, max_wait=30.0, expected_steps=10)


def ticket(request_id: str, session: str, arrived: float = 0.0, priority: int = 0, tokens: int = 500) -> Ticket:
    return Ticket(request_id, session, priority, arrived, tokens)


def warm(request_id: str, session: str, arrived: float = 0.0) -> Ticket:
    return ticket(request_id, session, arrived, WARM_PRIORITY)


def view(waiting: list[Ticket], running: list[Ticket] = (), sessions: dict[str, Progress] | None = None,
         now: float = 10.0, written: int = 0, engine: EngineLoad | None = None) -> View:
    return View(now, tuple(waiting), tuple(running), sessions or {}, written, engine)


def admitted(decision: Decision) -> list[str]:
    return [request_id for request_id, _ in decision.admit]


def test_fcfs_admits_everything_at_once_with_its_own_priority() -> None:
    decision = FCFS().decide(view([ticket("a", "s1"), warm("w", "s2"), ticket("b", "s3")],
                                  running=[ticket(f"r{i}", f"x{i}") for i in range(50)]))
    assert decision.admit == (("a", 0), ("w", WARM_PRIORITY), ("b", 0))
    assert decision.abort == () and decision.drop == () and decision.wake_in is None


def test_pacing_admits_up_to_the_knee_in_arrival_order_when_nothing_else_differs() -> None:
    started = {s: Progress(steps=1) for s in ("s1", "s2", "s3")}
    decision = PACING.decide(view([ticket("a", "s1", 1.0), ticket("b", "s2", 2.0), ticket("c", "s3", 3.0)],
                                  sessions=started))
    assert admitted(decision) == ["a", "b"]
    assert decision.wake_in == 3.0 + 30.0 - 10.0  # when "c" will have waited max_wait


def test_running_requests_count_against_the_knee() -> None:
    decision = PACING.decide(view([ticket("a", "s1")], running=[ticket("r1", "s2"), ticket("r2", "s3")]))
    assert admitted(decision) == []


def test_a_session_whose_prefix_is_still_cached_goes_first() -> None:
    sessions = {"old": Progress(steps=5, context_tokens=2_000, written_at_end=0),
                "fresh": Progress(steps=5, context_tokens=2_000, written_at_end=9_000)}
    # 12,000 tokens were written since "old" ended (more than the cache holds): its prefix is gone.
    decision = PACING.decide(view([ticket("o", "old", 1.0), ticket("f", "fresh", 2.0)],
                                  running=[ticket("r", "x")], sessions=sessions, written=12_000))
    assert admitted(decision) == ["f"]


def test_residency_counts_what_running_requests_pin_in_the_cache() -> None:
    progress = Progress(steps=3, context_tokens=2_000, written_at_end=0)
    assert PACING.resident(progress, written=7_000, pinned=0)
    assert not PACING.resident(progress, written=7_000, pinned=2_000)  # 7,000 + 2,000 + 2,000 > 10,000
    assert not PACING.resident(Progress(), written=0, pinned=0)  # a session that never ran has nothing cached


def test_among_cached_sessions_the_one_closest_to_its_end_goes_first() -> None:
    sessions = {"early": Progress(steps=1, context_tokens=800, written_at_end=100),
                "late": Progress(steps=8, context_tokens=3_000, written_at_end=100)}
    decision = PACING.decide(view([ticket("e", "early", 1.0), ticket("l", "late", 2.0)],
                                  running=[ticket("r", "x")], sessions=sessions, written=200))
    assert admitted(decision) == ["l"]


def test_a_started_sessions_request_waits_behind_cached_ones_but_not_forever() -> None:
    sessions = {"cached": Progress(steps=2, context_tokens=1_000, written_at_end=0),
                "evicted": Progress(steps=2, context_tokens=1_000, written_at_end=None)}
    waiting = [ticket("e", "evicted", 0.0), ticket("c", "cached", 5.0)]
    decision = PACING.decide(view(waiting, running=[ticket("r", "x")], sessions=sessions, now=10.0, written=100))
    assert admitted(decision) == ["c"]
    assert decision.wake_in == 20.0  # "e" arrived at 0 and may wait 30 s
    later = PACING.decide(view(waiting, running=[ticket("r", "x")], sessions=sessions, now=30.0, written=100))
    assert admitted(later)[0] == "e"


def test_a_session_that_never_ran_waits_for_room_without_a_bound() -> None:
    """Admission control: starting every waiting session in turn would re-prefill each of them, evicted."""
    sessions = {"cached": Progress(steps=2, context_tokens=1_000, written_at_end=0)}
    waiting = [ticket("new", "new", 0.0), ticket("c", "cached", 5.0)]
    decision = PACING.decide(view(waiting, running=[ticket("r", "x")], sessions=sessions, now=100.0, written=100))
    assert admitted(decision) == ["c"] and decision.wake_in is None
    room = PACING.decide(view([ticket("new", "new", 0.0)], sessions=sessions, now=100.0, written=100))
    assert admitted(room) == ["new"]


def test_aged_requests_go_first_but_within_the_knee() -> None:
    sessions = {"s1": Progress(steps=1), "s2": Progress(steps=1)}
    running = [ticket("r1", "x1"), ticket("r2", "x2")]
    full = PACING.decide(view([ticket("aged", "s1", 0.0), ticket("young", "s2", 25.0)], running,
                              sessions=sessions, now=31.0))
    assert admitted(full) == []  # flooding the engine past its knee would slow every request in it
    assert full.wake_in == 25.0 + 30.0 - 31.0  # "young" ages then; "aged" needs no timer, it is first in line
    one_free = PACING.decide(view([ticket("young", "s2", 25.0), ticket("aged", "s1", 0.0)], running[:1],
                                  sessions=sessions, now=31.0))
    assert admitted(one_free) == ["aged"]


def test_aged_requests_take_the_free_slots_before_ranked_ones() -> None:
    sessions = {"hot": Progress(steps=9, context_tokens=1_000, written_at_end=0), "cold": Progress(steps=1)}
    decision = PACING.decide(view([ticket("aged", "cold", 0.0), ticket("h", "hot", 29.0)],
                                  running=[ticket("r", "x")], sessions=sessions, now=30.0, written=10))
    assert admitted(decision) == ["aged"]


def test_prompts_in_flight_stay_within_the_kv_cache() -> None:
    pacing = Pacing(knee=8, kv_tokens=10_000, max_wait=30.0)  # 9,000 tokens of prompts at most (KV_SHARE)
    running = [ticket("r", "x", tokens=5_000)]
    decision = pacing.decide(view([ticket("a", "s1", 1.0, tokens=3_000), ticket("b", "s2", 2.0, tokens=3_000),
                                   ticket("c", "s3", 3.0, tokens=500)], running))
    assert admitted(decision) == ["a"]  # "b" would not fit; "c" is behind it and waits too
    alone = pacing.decide(view([ticket("huge", "s1", tokens=50_000)]))
    assert admitted(alone) == ["huge"]  # with nothing running, even a prompt larger than the budget goes


def test_the_engines_own_kv_count_holds_back_what_the_prompt_estimate_would_admit() -> None:
    """A running request's answer fills the cache too: the engine counts it, the prompt estimate does not."""
    pacing = Pacing(knee=8, kv_tokens=10_000, max_wait=30.0)
    running = [ticket("r", "x", tokens=1_000)]
    waiting = [ticket("a", "s1", 1.0, tokens=3_000)]
    assert admitted(pacing.decide(view(waiting, running))) == ["a"]
    engine = EngineLoad(running=1, waiting=0, kv_usage=0.7)  # 7,000 tokens held: 2,000 left of the 9,000
    held = pacing.decide(view(waiting, running, engine=engine))
    assert admitted(held) == []
    assert held.wake_in == RECHECK  # the engine's counts are a step old: look again soon


def test_requests_that_bypass_the_co_scheduler_count_against_the_knee() -> None:
    """Another client of the same engine (a single `tao run`) takes batch slots the co-scheduler never saw."""
    waiting = [ticket("a", "s1", 1.0), ticket("b", "s2", 2.0)]
    engine = EngineLoad(running=1, waiting=0, kv_usage=0.05)
    assert admitted(PACING.decide(view(waiting, engine=engine))) == ["a"]  # knee 2, one taken by the other client
    full = PACING.decide(view(waiting, engine=EngineLoad(running=1, waiting=1, kv_usage=0.05)))
    assert admitted(full) == []
    assert full.wake_in == RECHECK


def test_a_huge_prompt_waits_while_other_clients_hold_the_cache() -> None:
    pacing = Pacing(knee=8, kv_tokens=10_000, max_wait=30.0)
    huge = [ticket("huge", "s1", tokens=50_000)]
    assert admitted(pacing.decide(view(huge, engine=EngineLoad(running=1, waiting=0, kv_usage=0.5)))) == []
    assert admitted(pacing.decide(view(huge, engine=EngineLoad()))) == ["huge"]  # an idle engine takes it


def test_when_the_engines_counts_agree_with_its_own_books_the_bounded_wait_sets_the_wake_up() -> None:
    started = {"s1": Progress(steps=1)}
    decision = PACING.decide(view([ticket("a", "s1", 9.0)], running=[ticket("r1", "x"), ticket("r2", "y")],
                                  sessions=started, engine=EngineLoad(running=2, waiting=0, kv_usage=0.1)))
    assert admitted(decision) == [] and decision.wake_in == 9.0 + 30.0 - 10.0  # the bounded wait, not RECHECK


def test_speculative_prefill_waits_while_an_authoritative_request_waits_and_running_ones_are_aborted() -> None:
    running = [ticket("r1", "x1"), warm("w-run", "x2")]
    decision = PACING.decide(view([warm("w-new", "s3", 0.0), ticket("a", "s1", 1.0)], running))
    assert admitted(decision) == []
    assert decision.abort == ("w-run",)


def test_speculative_prefill_runs_last_when_room_is_left() -> None:
    decision = PACING.decide(view([warm("w", "s2", 0.0), ticket("a", "s1", 1.0)]))
    assert decision.admit == (("a", 0), ("w", WARM_PRIORITY))
    assert decision.abort == ()


def test_speculative_prefill_is_held_when_the_knee_is_full_but_not_aborted_if_nobody_waits() -> None:
    running = [ticket("r1", "x1"), warm("w-run", "x2")]
    decision = PACING.decide(view([warm("w", "s3")], running))
    assert admitted(decision) == [] and decision.abort == () and decision.wake_in is None


def test_a_sessions_waiting_warm_up_is_dropped_once_its_real_request_is_there() -> None:
    decision = PACING.decide(view([warm("w", "s1", 0.0), ticket("a", "s1", 1.0)]))
    assert decision.drop == ("w",)
    assert admitted(decision) == ["a"]
    running_real = PACING.decide(view([warm("w2", "s2")], running=[ticket("b", "s2")]))
    assert running_real.drop == ("w2",) and admitted(running_real) == []


def test_bounded_wait_does_not_apply_to_speculative_prefills() -> None:
    running = [ticket("r1", "x1"), ticket("r2", "x2")]
    decision = PACING.decide(view([warm("w", "s1", 0.0)], running, now=1_000.0))
    assert admitted(decision) == [] and decision.wake_in is None


def test_a_wait_that_ends_within_rounding_counts_as_over_so_the_wake_up_is_never_tiny() -> None:
    running = [ticket("r1", "x1"), ticket("r2", "x2")]
    arrived = 16.2
    now = arrived + 32.240614000298415  # now - arrived falls just short of max_wait in floating point
    pacing = Pacing(knee=2, kv_tokens=10_000, max_wait=32.240614000298415)
    sessions = {"s1": Progress(steps=1), "s2": Progress(steps=1)}
    decision = pacing.decide(view([ticket("a", "s1", arrived), ticket("b", "s2", now - 5.0)], running, sessions,
                                  now=now))
    assert admitted(decision) == [] and decision.wake_in is not None
    assert decision.wake_in is not None and decision.wake_in >= EARLY


def test_under_load_speculative_prefills_wait_for_the_engine_to_thin_out() -> None:
    pacing = Pacing(knee=8, kv_tokens=10_000, max_wait=30.0, spec_room=2)
    busy = pacing.decide(view([warm("w", "s9")], running=[ticket("r1", "x1"), ticket("r2", "x2")]))
    assert admitted(busy) == [] and busy.abort == ()  # room at the knee, but not below spec_room
    quiet = pacing.decide(view([warm("w", "s9"), warm("v", "s8")], running=[ticket("r1", "x1")]))
    assert admitted(quiet) == ["w"]


# -- interactive requests (a person waits) come first in every policy ------------------------------------------


def interactive(request_id: str, session: str, arrived: float = 0.0) -> Ticket:
    return ticket(request_id, session, arrived, INTERACTIVE_PRIORITY)


def test_fcfs_admits_interactive_requests_ahead_of_batch_ones() -> None:
    decision = FCFS().decide(view([ticket("b", "s1", 0.0), interactive("i", "me", 5.0)]))
    assert admitted(decision) == ["i", "b"]


def test_pacing_admits_interactive_requests_even_over_the_knee() -> None:
    running = [ticket("r1", "x1"), ticket("r2", "x2")]  # the knee (2) is full
    sessions = {"s1": Progress(steps=1)}
    decision = PACING.decide(view([ticket("b", "s1", 0.0), interactive("i", "me", 5.0)], running, sessions=sessions))
    assert admitted(decision) == ["i"]
    assert decision.admit[0] == ("i", INTERACTIVE_PRIORITY)
    one_free = PACING.decide(view([ticket("b", "s1", 0.0), interactive("i", "me", 5.0)], running[:1],
                                  sessions=sessions))
    assert admitted(one_free) == ["i"]  # the interactive request takes the free place


def test_every_rival_admits_interactive_requests_first_even_when_full() -> None:
    full = {f"s{i}": Progress(steps=1, context_tokens=4_000, ended_at=9.0) for i in range(3)}
    waiting = [ticket("b", "new", 0.0, tokens=4_000), interactive("i", "me", 5.0)]
    running = [ticket("r", "s0", tokens=4_000)]
    for policy in (Cap(2), LAS(), TTL(kv_tokens=10_000, reload_per_token=1e-3)):
        decision = policy.decide(view(waiting, running, sessions=full))
        assert admitted(decision)[0] == "i", policy.name
        assert decision.admit[0][1] == INTERACTIVE_PRIORITY, policy.name


# -- Cap: FCFS with at most C sessions in flight (a batch run's --workers C) ----------------------------------


def test_cap_holds_the_session_past_its_limit_until_one_ends() -> None:
    cap = Cap(2)
    started = {"s1": Progress(steps=1, ended_at=9.0), "s2": Progress(steps=3, ended_at=8.0)}  # both in a tool
    decision = cap.decide(view([ticket("new", "s3", 1.0)], sessions=started))
    assert admitted(decision) == []  # two sessions in flight, though neither has a request in the engine
    assert decision.wake_in == 600.0 - 2.0  # s2, silent since 8.0, counts as ended after `idle`
    ended = {**started, "s2": Progress(steps=3, ended_at=8.0, finished=True)}
    assert admitted(cap.decide(view([ticket("new", "s3", 1.0)], sessions=ended))) == ["new"]


def test_cap_lets_requests_of_sessions_in_flight_through_at_once() -> None:
    cap = Cap(2)
    running = [ticket("r1", "s1"), ticket("r2", "s2")]
    sessions = {"s1": Progress(steps=1), "s2": Progress(steps=1)}
    decision = cap.decide(view([ticket("a", "s3", 0.0), ticket("b", "s1", 1.0), ticket("c", "s4", 2.0)], running,
                               sessions=sessions))
    assert admitted(decision) == ["b"]
    assert decision.admit == (("b", 0),)


def test_cap_starts_new_sessions_in_arrival_order_up_to_the_limit() -> None:
    decision = Cap(3).decide(view([ticket(f"n{i}", f"s{i}", float(i)) for i in range(5)],
                                  running=[ticket("r", "x")], sessions={"x": Progress()}))
    assert admitted(decision) == ["n0", "n1"]  # x holds the third place


def test_a_silent_session_frees_its_place_for_clients_that_never_say_they_ended() -> None:
    sessions = {"gone": Progress(steps=4, ended_at=0.0)}
    assert admitted(Cap(1, idle=60.0).decide(view([ticket("n", "new")], sessions=sessions, now=59.0))) == []
    assert admitted(Cap(1, idle=60.0).decide(view([ticket("n", "new")], sessions=sessions, now=61.0))) == ["n"]


# -- LAS: least attained service first (Autellix) ----------------------------------------------------------------


def test_las_admits_everything_ranked_by_the_service_each_session_got() -> None:
    sessions = {"long": Progress(steps=9, attained=25_000), "short": Progress(steps=2, attained=3_400)}
    waiting = [ticket("l", "long", 0.0), ticket("s", "short", 1.0), ticket("n", "new", 2.0), warm("w", "short")]
    decision = LAS().decide(view(waiting, running=[ticket(f"r{i}", f"x{i}") for i in range(50)], sessions=sessions))
    assert decision.admit == (("n", 0), ("s", 3), ("l", 25), ("w", WARM_PRIORITY))


def test_las_levels_stay_below_speculations_priority() -> None:
    sessions = {"huge": Progress(steps=99, attained=10**9)}
    assert LAS().decide(view([ticket("h", "huge")], sessions=sessions)).admit == (("h", WARM_PRIORITY - 1),)


# -- TTL: a session's place and context held across its tool call (Continuum) ---------------------------------

TTL_POLICY = TTL(kv_tokens=10_000, reload_per_token=1e-3)  # TTL = (reload + queueing) * 10,000 / context


def test_ttl_is_reload_and_queueing_weighed_against_the_cache_it_holds() -> None:
    progress = Progress(steps=2, context_tokens=2_000, ended_at=10.0)
    assert TTL_POLICY.ttl(progress, view([]), 10.0) == 2.0 * 10_000 / 2_000  # 2 s of reload, nothing queued: 10 s
    queued = view([ticket("q", "other", arrived=7.0)], now=30.0)  # the queue's head had waited 3 s at the end
    assert TTL_POLICY.ttl(progress, queued, 10.0) == (2.0 + 3.0) * 10_000 / 2_000
    assert TTL_POLICY.expires(progress, queued) == 10.0 + 25.0


def test_ttl_holds_a_sessions_room_in_the_cache_during_its_tool_call_then_frees_it() -> None:
    sessions = {"held": Progress(steps=2, context_tokens=4_000, ended_at=10.0)}
    newcomer = [ticket("n", "new", 11.0, tokens=6_000)]
    running = [ticket("r", "x", tokens=500)]
    decision = TTL_POLICY.decide(view(newcomer, running, sessions=sessions, now=12.0))
    assert admitted(decision) == []  # 4,000 held + 500 running + 6,000 > 9,000 (KV_SHARE of 10,000)
    assert decision.wake_in == 20.0 - 12.0  # 4 s of reload, nobody queued at 10: TTL 4 * 10,000 / 4,000 = 10 s
    expired = TTL_POLICY.decide(view(newcomer, running, sessions=sessions, now=20.0))
    assert admitted(expired) == ["n"]


def test_ttl_does_not_hold_a_session_expected_back_after_its_ttl() -> None:
    slow_tool = Progress(steps=2, context_tokens=4_000, ended_at=10.0, tool_started=10.0, tool_expected=60.0)
    decision = TTL_POLICY.decide(view([ticket("n", "new", 11.0, tokens=6_000)], [ticket("r", "x", tokens=500)],
                                      sessions={"slow": slow_tool}, now=12.0))
    assert admitted(decision) == ["n"]


def test_ttl_lets_a_session_back_within_its_ttl_go_first_then_older_sessions() -> None:
    sessions = {"back": Progress(steps=2, context_tokens=2_000, last_gap=3.0),  # returned 3 s after (TTL 10 s)
                "late": Progress(steps=2, context_tokens=2_000, last_gap=30.0)}
    waiting = [ticket("n", "new", 1.0, tokens=3_000), ticket("l", "late", 2.0, tokens=2_500),
               ticket("b", "back", 3.0, tokens=2_500)]
    decision = TTL_POLICY.decide(view(waiting, [ticket("r", "x", tokens=3_000)], sessions=sessions, now=4.0))
    assert admitted(decision) == ["b", "l"]  # then started sessions in order; 3,000 more would not fit: "n" waits


# -- Pacing's own limits on starting new sessions ----------------------------------------------------------------


def test_pacing_starts_only_as_many_sessions_as_end_soonest_on_average() -> None:
    pacing = Pacing(knee=8, kv_tokens=100_000, max_wait=30.0, batch_cost=1.0)  # sqrt(sessions left) at once
    fresh = pacing.decide(view([ticket(f"n{i}", f"new{i}", float(i)) for i in range(4)]))
    assert admitted(fresh) == ["n0", "n1"]  # 4 sessions left: 2 at once
    started = {"a": Progress(steps=3), "b": Progress(steps=3)}
    waiting = [ticket("n", "new", 0.0), ticket("ra", "a", 1.0), ticket("rb", "b", 2.0), ticket("m", "new2", 3.0)]
    assert sorted(admitted(pacing.decide(view(waiting, sessions=started)))) == ["ra", "rb"]  # started ones go on
    done = {"a": Progress(steps=9, finished=True), "b": Progress(steps=3)}
    assert admitted(pacing.decide(view([ticket("n", "new", 0.0)], [ticket("rb", "b")], sessions=done))) == ["n"]


def test_pacing_can_keep_room_for_the_contexts_of_sessions_in_a_tool() -> None:
    pacing = Pacing(knee=8, kv_tokens=10_000, max_wait=30.0, retain=0.9)
    in_tool = {"busy": Progress(steps=3, context_tokens=8_000, ended_at=9.0)}
    newcomer = [ticket("n", "new", 5.0, tokens=2_000)]
    assert admitted(pacing.decide(view(newcomer, [ticket("r", "x", tokens=100)], sessions=in_tool))) == []
    over = {"busy": replace(in_tool["busy"], finished=True)}
    assert admitted(pacing.decide(view(newcomer, [ticket("r", "x", tokens=100)], sessions=over))) == ["n"]
