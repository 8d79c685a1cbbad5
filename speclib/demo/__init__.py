"""Layer 1 — the embedded demo: synthetic chats, prompt sets and the tiny target/draft pair
built offline on the CPU. Imports only :mod:`speclib.core`."""
