"""Compatibility gate: may a candidate job version restart on an existing checkpoint?"""
