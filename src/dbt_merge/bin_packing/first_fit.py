"""The first-fit index: the leftmost bin with room, in O(log bins). The streaming
packer and offline first-fit-decreasing both search it."""

from __future__ import annotations

_CLOSED = -1  # index value of a slot that accepts nothing


class _FirstFitIndex:
    """Slots in creation order; finds the leftmost slot whose value is >= x in O(log n).

    A max segment tree over the slots' values (remaining capacity; -1 for a slot that
    accepts nothing), grown by doubling. The newest slot is kept out of the tree:
    it is the one most items go to, and as the usual maximum each of its updates
    would climb to the root.
    """

    __slots__ = ("_cap", "_n", "_tail", "_tree")

    def __init__(self) -> None:
        self._cap = 8
        self._n = 0
        self._tail: float = _CLOSED
        self._tree: list[float] = [_CLOSED] * 16

    def __len__(self) -> int:
        return self._n

    def append(self, value: float) -> int:
        """Add a slot after the others; returns its number."""
        if self._n:
            self._set_in_tree(self._n - 1, self._tail)
        if self._n == self._cap:
            self._grow()
        self._tail = value
        self._n += 1
        return self._n - 1

    def _grow(self) -> None:
        cap = self._cap * 2
        tree: list[float] = [_CLOSED] * (2 * cap)
        tree[cap : cap + self._n] = self._tree[self._cap : self._cap + self._n]
        for i in range(cap - 1, 0, -1):
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left > right else right
        self._cap, self._tree = cap, tree

    def first_at_least(self, x: float) -> int:
        """Leftmost slot with value >= x, or -1."""
        tree = self._tree
        if tree[1] < x:
            return self._n - 1 if self._n and self._tail >= x else -1
        i, cap = 1, self._cap
        while i < cap:
            i += i
            if tree[i] < x:
                i += 1
        return i - cap

    def set(self, slot: int, value: float) -> None:
        """Change a slot's value."""
        if slot == self._n - 1:
            self._tail = value
        else:
            self._set_in_tree(slot, value)

    def _set_in_tree(self, slot: int, value: float) -> None:
        tree = self._tree
        i = slot + self._cap
        tree[i] = value
        while i > 1:
            sibling = tree[i ^ 1]
            if sibling > value:
                value = sibling  # the parent's max
            i >>= 1
            if tree[i] == value:
                break
            tree[i] = value
