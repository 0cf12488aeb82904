"""Redis Lua scripts of the resequencer (package data: each header documents its keys)."""
