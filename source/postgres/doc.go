// Package postgres mirrors a PostgreSQL table into an informer through logical
// replication: Source[V] is an informer.ListerWatcher[V] over one table.
package postgres
