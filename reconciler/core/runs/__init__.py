"""The pure model of an agent run: its states and legal moves, its event log and the run as a
projection of it, and the conversation's messages. Plain data and functions, no I/O: the store
keeps runs and the runtime drives them, and both import this, never each other."""
