-- A NodePort is cluster-wide: at most one live (or deleting) control plane holds each port. If this fails
-- with a duplicate key, two live control planes already share a NodePort (only one of them can ever have
-- had its Service): delete one of them first.
create unique index control_planes_node_port_key on control_planes (port)
    where service_type = 'NodePort' and deleted_at is null;
