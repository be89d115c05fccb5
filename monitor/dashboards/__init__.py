"""Grafana: the dashboards' push to a running Grafana."""
