"""Builders and assertions the tests share: tiny hosts, exactness bounds, padding, hooks."""
