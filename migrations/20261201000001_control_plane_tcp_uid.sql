-- The UID of the TenantControlPlane the worker made for a control plane (the object at the namespace from
-- the template and the row's name). Set by every apply of the worker from the API server's answer, or by
-- the status watcher on first sight when unset; cleared when that object is deleted. Status is written
-- back, and the kubeconfig Secret is served, only for the TCP with this UID.
alter table control_planes add column tcp_uid text;
