"""Due jobs, from the store to the broker: the store (store/, the only home of SQL), the
wire format both sides share (wire), producer planning (calls), the drain loop and its
process (drain, lanes, service), the one confirm-batching publisher (publisher,
task_message, outgoing, frames), beat entries, pull-forward and the dead-letter sweep."""
