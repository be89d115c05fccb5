"""Where notifications go: webhook, Alertmanager, Slack."""
