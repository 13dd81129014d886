"""What the cluster says, read only: the informers and their trimmed caches, where a pass reads from
(source), the cluster index of gangs, nodes and capacity, the pass's snapshot (reuse), the workload a
gang's stamp names (resolve, workloads), which watched objects concern which gangs (related), and
whether an autoscaler grows the cluster. May use decide's rules; never writes."""
