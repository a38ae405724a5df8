"""The topic exchange: binding keys are dot-separated patterns over routing-key words.

`*` matches exactly one word and `#` zero or more. Words may be empty ("a..b" has three
words, "." has two) and the empty key has no words at all, as in RabbitMQ. Patterns live in a
trie walked as a set of states, one step per routing-key word, so repeated `#` never makes
matching exponential; results are cached per routing key until the bindings change.
"""

from __future__ import annotations

from lavin.api import Arguments, Binding, BindingId, BindingTable, Destination, DestinationSet, Message

ONE_WORD = "*"
ANY_WORDS = "#"
# Bounds memory when publishers use many distinct keys; the cache restarts empty when full.
ROUTE_CACHE_SIZE = 4096


def split_words(key: str) -> list[str]:
    return key.split(".") if key else []


def pattern_words(binding_key: str) -> list[str]:
    """The binding key's words with runs of `#` collapsed: `#.#` matches what `#` matches."""
    words: list[str] = []
    for word in split_words(binding_key):
        if not (word == ANY_WORDS and words and words[-1] == ANY_WORDS):
            words.append(word)
    return words


class _Node:
    __slots__ = ("any_words", "loops", "one_word", "targets", "words")

    def __init__(self, loops: bool = False) -> None:
        self.words: dict[str, _Node] = {}
        self.one_word: _Node | None = None
        self.any_words: _Node | None = None
        # Reached through `#`: any further word may stay here.
        self.loops = loops
        self.targets = DestinationSet()

    def child(self, word: str) -> _Node | None:
        if word == ONE_WORD:
            return self.one_word
        if word == ANY_WORDS:
            return self.any_words
        return self.words.get(word)

    def add_child(self, word: str) -> _Node:
        node = _Node(loops=word == ANY_WORDS)
        if word == ONE_WORD:
            self.one_word = node
        elif word == ANY_WORDS:
            self.any_words = node
        else:
            self.words[word] = node
        return node

    def remove_child(self, word: str) -> None:
        if word == ONE_WORD:
            self.one_word = None
        elif word == ANY_WORDS:
            self.any_words = None
        else:
            del self.words[word]

    def is_empty(self) -> bool:
        return not (self.targets or self.words or self.one_word or self.any_words)


def _with_empty_matches(nodes: set[_Node]) -> set[_Node]:
    """Add the `#` children, which match without consuming a word.

    One level is enough: collapsed patterns never put `#` right under `#`.
    """
    return nodes | {node.any_words for node in nodes if node.any_words is not None}


class TopicExchange(BindingTable):
    name = "topic"

    def __init__(self, arguments: Arguments) -> None:
        super().__init__(arguments)
        self._root = _Node()
        self._route_cache: dict[str, tuple[Destination, ...]] = {}

    def _index(self, binding_id: BindingId, binding: Binding) -> None:
        node = self._root
        for word in pattern_words(binding.routing_key):
            node = node.child(word) or node.add_child(word)
        node.targets.add(binding_id)
        self._route_cache.clear()

    def _unindex(self, binding_id: BindingId, binding: Binding) -> None:
        path: list[tuple[_Node, str]] = []
        node = self._root
        for word in pattern_words(binding.routing_key):
            path.append((node, word))
            child = node.child(word)
            assert child is not None, "an indexed binding has its whole path"
            node = child
        node.targets.discard(binding_id)
        # Prune the branch bottom-up so unbound patterns do not slow matching down.
        for parent, word in reversed(path):
            if not node.is_empty():
                break
            parent.remove_child(word)
            node = parent
        self._route_cache.clear()

    def route(self, routing_key: str, message: Message) -> tuple[Destination, ...]:
        cached = self._route_cache.get(routing_key)
        if cached is None:
            cached = self._match(routing_key)
            if len(self._route_cache) >= ROUTE_CACHE_SIZE:
                self._route_cache.clear()
            self._route_cache[routing_key] = cached
        return cached

    def _match(self, routing_key: str) -> tuple[Destination, ...]:
        states = _with_empty_matches({self._root})
        for word in split_words(routing_key):
            following: set[_Node] = set()
            for node in states:
                if node.loops:
                    following.add(node)
                literal = node.words.get(word)
                if literal is not None:
                    following.add(literal)
                if node.one_word is not None:
                    following.add(node.one_word)
            if not following:
                return ()
            states = _with_empty_matches(following)
        matched: dict[Destination, None] = {}
        for node in states:
            if node.targets:
                matched.update(dict.fromkeys(node.targets.destinations))
        return tuple(matched)
