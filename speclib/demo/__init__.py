"""Layer 2 — the embedded demo: synthetic chats, prompt sets and the tiny target/draft pair
built offline on the CPU. Imports no other speclib package (it sits beside
:mod:`speclib.params`: neither imports the other)."""
