"""Domain policy rules as checks on tool calls: the rule format, the facts a rule reads, the
evaluator that makes judges of them, and the airline and retail rule sets."""
