"""The resequencer: messages for a destination processed in parallel and sent in arrival
order. intake (number and publish), state (Redis, with lua/), sender (one per
destination, under a lease), outbound (HTTP), outage and dead_letters (what a
destination holds back or refuses). docs/resequencer.md tells the whole story."""
