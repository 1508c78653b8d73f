"""Pairwise rounds that name a bad node or a bad link in at most two rounds (after DLRover).

Round 1 pairs neighbours (an odd node out is paired with the first node as well). Every node of
a failed pair is a suspect; round 2 pairs each suspect with a node that passed. A suspect that
fails again, with a healthy peer, is bad; a failed pair whose two nodes both pass with healthy
peers is a bad link. A pair that was only slow also runs again in round 2 and is a bad link only
if it is slow again (once could be noise). Without any healthy peer nothing can be told apart,
and every suspect is named.
"""

from __future__ import annotations

from typing import Mapping, Sequence

Pair = tuple[str, str]


def first_pairs(nodes: Sequence[str]) -> list[Pair]:
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2 and len(nodes) > 1:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


def suspects_of(failed: Sequence[Pair]) -> list[str]:
    return list(dict.fromkeys(node for pair in failed for node in pair))


def second_pairs(failed: Sequence[Pair], nodes: Sequence[str]) -> list[Pair]:
    """Each suspect with a distinct node that passed round 1 (reused when there are too few)."""
    suspects = suspects_of(failed)
    good = [n for n in nodes if n not in suspects]
    if not good:
        return []
    return [(good[i % len(good)], suspect) for i, suspect in enumerate(suspects)]


def resolve(failed: Sequence[Pair], second: Mapping[Pair, bool], reasons: Mapping[Pair, str]) \
        -> tuple[dict[str, str], dict[Pair, str]]:
    """Name the culprits from round 1's failed pairs and round 2's results (pair -> passed).

    Round 2 may run a failed pair again (one that was slow rather than broken): passing then
    clears it as noise, failing again confirms it.

    :return: ``(bad nodes -> why, bad links -> why)``.
    """
    bad: dict[str, str] = {}
    for suspect in suspects_of(failed):
        partners = [a if b == suspect else b for a, b in failed if suspect in (a, b)]
        retests = [(pair, ok) for pair, ok in second.items() if suspect in pair and pair not in failed]
        first = f"failed with {', '.join(partners)} in round 1"
        if not retests:
            bad[suspect] = f"{first}; no healthy node to re-pair with"
            continue
        for pair, ok in retests:
            if not ok:
                peer = pair[0] if pair[1] == suspect else pair[1]
                bad[suspect] = f"{first} and with healthy {peer} in round 2: {reasons.get(pair, '')}".rstrip(": ")
                break
    links: dict[Pair, str] = {}
    for a, b in failed:
        if a not in bad and b not in bad and not second.get((a, b), False):
            again = " and again in round 2" if (a, b) in second else ""
            links[(a, b)] = f"failed in round 1{again} ({reasons.get((a, b), '')}), both ends pass with other peers"
    return bad, links
