"""The best expected return of gymnasium's toy_text tasks: anchors for the learning suite.

    .venv/bin/python benchmarks/optimal_returns.py

No published learning figures exist for these tasks (rl-baselines3-zoo has none), and
gymnasium's registered `reward_threshold` can sit above what any policy achieves (Taxi-v4:
8, where the optimum is 7.93). So the anchor is computed: the expected undiscounted
return of an optimal policy from the env's own start distribution, by dynamic programming.

- FrozenLake, Taxi, CliffWalking (and their 8x8 and slippery variants): backward induction
  over the env's own transition table (`env.unwrapped.P`) for as many steps as the time limit
  allows (CliffWalking has none: 1,000 steps, more than any optimal path needs).
- Blackjack-v1 (as registered: `sab=True`, Sutton & Barto's rules: an infinite deck, the
  dealer draws below 17, a two-card 21 that sticks beats all but the dealer's two-card 21):
  the same over those rules, as gymnasium's `blackjack.py` states them.

Both are checked against playing the optimal policy in gymnasium's own env
(tests/test_benchmarks.py).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

# Blackjack: an infinite deck, a card's value 1 (ace) to 10; 10, J, Q, K are 10.
CARDS = {card: (4 / 13 if card == 10 else 1 / 13) for card in range(1, 11)}
TABULAR = {
    "FrozenLake-v1": 100,
    "FrozenLake8x8-v1": 200,
    "Taxi-v4": 200,
    "CliffWalking-v1": 1000,
    "CliffWalkingSlippery-v1": 1000,
}


def tabular_optimum(env_id: str, horizon: int) -> tuple[float, np.ndarray]:
    """(expected return from the start distribution, greedy first-step action per state) of
    an optimal `horizon`-step policy on the env's transition table."""
    import gymnasium

    env = gymnasium.make(env_id).unwrapped
    table, num_states, num_actions = env.P, env.observation_space.n, env.action_space.n
    value = np.zeros(num_states)
    for _ in range(horizon):
        q = np.zeros((num_states, num_actions))
        for s, a in itertools.product(range(num_states), range(num_actions)):
            q[s, a] = sum(p * (r + (0.0 if done else value[s2])) for p, s2, r, done in table[s][a])
        value = q.max(axis=1)
    return float(env.initial_state_distrib @ value), q.argmax(axis=1)


def _hand_value(total: int, ace: bool) -> int:
    """`total` counts aces as 1; one ace counts 11 where that does not bust (a usable ace)."""
    return total + 10 if ace and total + 10 <= 21 else total


@functools.cache
def _dealer_finals(total: int, ace: bool) -> tuple[tuple[int, float], ...]:
    """The dealer's final hand value (0: bust) and its probability, drawing below 17."""
    value = _hand_value(total, ace)
    if value >= 17:
        return ((value if value <= 21 else 0, 1.0),)
    finals: dict[int, float] = {}
    for card, p in CARDS.items():
        for final, q in _dealer_finals(total + card, ace or card == 1):
            finals[final] = finals.get(final, 0.0) + p * q
    return tuple(finals.items())


def blackjack_stick_value(player: int, dealer_card: int) -> float:
    return sum(
        q * ((player > final) - (player < final))
        for final, q in _dealer_finals(dealer_card, dealer_card == 1)
    )


@functools.cache
def blackjack_value(total: int, ace: bool, dealer_card: int) -> float:
    """The optimal expected return of a player's hand (aces counted 1 in `total`)."""
    value = _hand_value(total, ace)
    if value > 21:
        return -1.0
    hit = sum(
        p * blackjack_value(total + card, ace or card == 1, dealer_card)
        for card, p in CARDS.items()
    )
    return max(blackjack_stick_value(value, dealer_card), hit)


def blackjack_hits(total: int, ace: bool, dealer_card: int) -> bool:
    """Whether the optimal policy hits on this hand."""
    return blackjack_value(total, ace, dealer_card) > blackjack_stick_value(
        _hand_value(total, ace), dealer_card
    )


def _dealer_natural(dealer_card: int) -> float:
    """The probability that the dealer's hidden card makes a two-card 21 with `dealer_card`."""
    return {1: CARDS[10], 10: CARDS[1]}.get(dealer_card, 0.0)


def blackjack_optimum() -> float:
    """The optimal expected return of a deal: two cards to the player, one shown by the dealer.

    A natural (ace and ten) sticks: under `sab` it wins unless the dealer has one too, where
    plain scoring would also tie it with a dealer's 21 of more cards."""
    import gymnasium

    registered = gymnasium.spec("Blackjack-v1").kwargs
    if registered != {"sab": True, "natural": False}:
        raise RuntimeError(
            f"Blackjack-v1 is registered with {registered}; this DP assumes sab=True, natural=False"
        )
    total = 0.0
    for a, b, d in itertools.product(CARDS, CARDS, CARDS):
        natural = sorted((a, b)) == [1, 10]
        value = 1.0 - _dealer_natural(d) if natural else blackjack_value(a + b, 1 in (a, b), d)
        total += CARDS[a] * CARDS[b] * CARDS[d] * value
    return total


def main() -> None:
    print("| task | optimal expected return | how |")
    print("|---|---|---|")
    for env_id, horizon in TABULAR.items():
        print(
            f"| {env_id} | {tabular_optimum(env_id, horizon)[0]:.3f} | "
            f"backward induction over env.unwrapped.P, {horizon} steps |"
        )
    print(f"| Blackjack-v1 | {blackjack_optimum():.3f} | backward induction over its rules |")


if __name__ == "__main__":
    main()
