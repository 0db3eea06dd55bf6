-- `holdfast-server reconcile`: importing a 3PL inventory snapshot (CSV) page
-- by page, reporting where its counts differ from our on_hand, and on request
-- booking the differences through the inventory ledger.
--
-- A run is identified by (tenant, SHA-256 of the file's bytes): running the
-- same file again finds the same run, so a killed import resumes and a
-- finished one is not imported (or applied) twice. Every page commits its
-- staged rows together with its checkpoint row, so "how far did we get" is
-- exactly what is staged. tenant_id leads every key, as everywhere.
--
-- Children cascade from their run so that reaping an old run (not done
-- automatically yet) is one `delete from reconcile_runs`.

create table reconcile_runs (
    tenant_id    uuid not null references tenants (id),
    id           uuid not null,
    file_sha256  bytea not null check (length(file_sha256) = 32),
    -- As given on the command line the first time; for people reading reports.
    file_name    text not null,
    -- Data rows in the file (blank lines excluded). Known up front because the
    -- whole file is hashed before anything is imported; a later run of the
    -- same bytes must count the same, or the parser changed under it.
    records      bigint not null check (records >= 0),
    created_at   timestamptz not null default now(),
    -- Set by the transaction that commits the last page.
    imported_at  timestamptz,
    -- Set when an --apply pass left no SKU undecided or refused.
    applied_at   timestamptz,
    primary key (tenant_id, id),
    unique (tenant_id, file_sha256),
    check (applied_at is null or imported_at is not null)
);

-- The checkpoints: one row per committed page, in the page's transaction.
-- A page covers data records [first_record, end_record) (0-based, blank lines
-- not counted), so the resume point is max(end_record) whatever page size
-- each attempt used. The primary key makes committing a page twice an error
-- rather than a silent double import (the importer also locks the run row).
create table reconcile_pages (
    tenant_id     uuid not null,
    run_id        uuid not null,
    first_record  bigint not null check (first_record >= 0),
    end_record    bigint not null,
    -- The file line the page ended on, for progress and audit.
    last_line     bigint not null,
    counted_rows  integer not null check (counted_rows >= 0),
    rejected_rows integer not null check (rejected_rows >= 0),
    committed_at  timestamptz not null default now(),
    primary key (tenant_id, run_id, first_record),
    foreign key (tenant_id, run_id) references reconcile_runs (tenant_id, id) on delete cascade,
    check (end_record > first_record)
);

-- The staging table: the counted quantity per SKU, at most one row per SKU
-- per run (a SKU counted twice in one file is rejected on its second line,
-- not summed or overwritten: which line is right is the operator's call).
-- The FK to skus means only SKUs we know can be staged; unknown ones are
-- rejects. The outcome columns are written by --apply in the SAME transaction
-- that books the difference, so they are the apply checkpoint: a killed apply
-- resumes at the first undecided SKU and never books one twice.
create table reconcile_counts (
    tenant_id       uuid not null,
    run_id          uuid not null,
    sku_id          uuid not null,
    -- Where the count came from in the file (1-based, as an editor shows it).
    line_no         bigint not null check (line_no >= 1),
    counted         bigint not null check (counted >= 0),
    -- null: not applied yet. unchanged: on_hand already equalled the count.
    -- booked: on_hand set to the count, with its ledger row. refused: setting
    -- it would break allocated <= on_hand + on_order (retried by a later
    -- --apply, e.g. after allocations were released).
    outcome         text check (outcome in ('unchanged', 'booked', 'refused')),
    on_hand_before  bigint,
    on_hand_after   bigint,
    -- Why it was refused, for the report.
    detail          text,
    decided_at      timestamptz,
    primary key (tenant_id, run_id, sku_id),
    foreign key (tenant_id, run_id) references reconcile_runs (tenant_id, id) on delete cascade,
    foreign key (tenant_id, sku_id) references skus (tenant_id, id),
    check ((outcome is null) = (decided_at is null))
);
-- --apply walks what is still to do in sku_id order; this keeps that cheap
-- when most of a large run is already decided.
create index reconcile_counts_todo on reconcile_counts (tenant_id, run_id, sku_id)
    where outcome is null or outcome = 'refused';

-- Rows that could not be staged (unknown SKU, bad number, wrong field count,
-- a SKU counted twice), with their line, so the report is the same whether
-- the import ran in one go or was killed and resumed.
create table reconcile_rejects (
    tenant_id  uuid not null,
    run_id     uuid not null,
    line_no    bigint not null check (line_no >= 1),
    reason     text not null,
    -- The row as it was in the file (truncated), so the operator can find it.
    raw        text not null,
    primary key (tenant_id, run_id, line_no),
    foreign key (tenant_id, run_id) references reconcile_runs (tenant_id, id) on delete cascade
);
