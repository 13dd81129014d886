"""Every write to the API server, one module per kind of write: releases (lifting gates), requeues
(suspend, evict, resume), preemption's evictions, the group objects of each mechanism, the Gang
objects, events, placeholders for an autoscaler, coscheduling wake-ups, uninstall. Each write asks
whether this replica still leads before it is made. Uses observe and decide; never the run room."""
