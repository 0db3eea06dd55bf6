//! What a reconcile run found and did, read back from the staging tables (so
//! a resumed run reports exactly what a clean one would), and its text form.

use std::fmt::Write;

use sqlx::PgPool;
use uuid::Uuid;

use super::apply::Applied;
use super::import::{Imported, Run};

/// A snapshot row that could not be staged.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Reject {
    pub line_no: i64,
    pub reason: String,
    pub raw: String,
}

/// A counted SKU as it stands now, with what --apply decided for it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Counted {
    pub sku_id: Uuid,
    pub style: String,
    pub color: String,
    pub size: String,
    pub line_no: i64,
    pub counted: i64,
    /// Our on_hand now (None: the SKU has no position row).
    pub on_hand: Option<i64>,
    pub outcome: Option<String>,
    pub on_hand_before: Option<i64>,
    pub on_hand_after: Option<i64>,
    pub detail: Option<String>,
}

impl Counted {
    fn name(&self) -> String {
        format!("{} / {} / {}", self.style, self.color, self.size)
    }
}

#[derive(Debug, Clone)]
pub struct Report {
    pub run_id: Uuid,
    pub tenant: String,
    pub file_name: String,
    pub sha256_hex: String,
    /// Data rows in the file.
    pub records: i64,
    pub imported: Imported,
    /// This invocation's apply pass, if --apply was given.
    pub applied: Option<Applied>,
    /// Whether an apply pass (this one or an earlier) left nothing to do.
    pub fully_applied: bool,
    pub counted_skus: i64,
    pub rejects: Vec<Reject>,
    /// Counted SKUs whose on_hand differs from the count right now.
    pub discrepancies: Vec<Counted>,
    /// SKUs this run booked (in any invocation), with before and after.
    pub booked: Vec<Counted>,
    /// SKUs --apply could not set without breaking allocated ≤ on_hand + on_order.
    pub refused: Vec<Counted>,
}

impl Report {
    /// Bad rows or refused SKUs: the operator has something to fix.
    pub fn has_problems(&self) -> bool {
        !self.rejects.is_empty() || !self.refused.is_empty()
    }

    pub(super) async fn load(
        db: &PgPool,
        run: &Run,
        tenant: &str,
        imported: Imported,
        applied: Option<Applied>,
    ) -> Result<Report, sqlx::Error> {
        let (file_name, sha256, applied_at): (
            String,
            Vec<u8>,
            Option<chrono::DateTime<chrono::Utc>>,
        ) = sqlx::query_as(
            "select file_name, file_sha256, applied_at from reconcile_runs
              where tenant_id = $1 and id = $2",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_one(db)
        .await?;
        let rejects: Vec<Reject> = sqlx::query_as(
            "select line_no, reason, raw from reconcile_rejects
              where tenant_id = $1 and run_id = $2 order by line_no",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_all(db)
        .await?;
        let counted_skus: i64 = sqlx::query_scalar(
            "select count(*) from reconcile_counts where tenant_id = $1 and run_id = $2",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_one(db)
        .await?;
        // Only the rows worth printing: a snapshot of 100k agreeing SKUs
        // stays a short report.
        let interesting: Vec<Counted> = sqlx::query_as(
            "select c.sku_id, s.style, s.color, s.size, c.line_no, c.counted, p.on_hand,
                    c.outcome, c.on_hand_before, c.on_hand_after, c.detail
               from reconcile_counts c
               join skus s on s.tenant_id = c.tenant_id and s.id = c.sku_id
               left join sku_positions p on p.tenant_id = c.tenant_id and p.sku_id = c.sku_id
              where c.tenant_id = $1 and c.run_id = $2
                and (p.on_hand is distinct from c.counted or c.outcome in ('booked', 'refused'))
              order by c.line_no",
        )
        .bind(run.tenant_id)
        .bind(run.id)
        .fetch_all(db)
        .await?;
        let pick = |f: &dyn Fn(&Counted) -> bool| -> Vec<Counted> {
            interesting.iter().filter(|c| f(c)).cloned().collect()
        };
        Ok(Report {
            run_id: run.id,
            tenant: tenant.to_owned(),
            file_name,
            sha256_hex: hex::encode(sha256),
            records: run.records,
            imported,
            applied,
            fully_applied: applied_at.is_some(),
            counted_skus,
            discrepancies: pick(&|c| c.on_hand != Some(c.counted)),
            booked: pick(&|c| c.outcome.as_deref() == Some("booked")),
            refused: pick(&|c| c.outcome.as_deref() == Some("refused")),
            rejects,
        })
    }

    /// The report for people: what was imported, what was wrong with the
    /// file, where the counts differ from on_hand, and what --apply did.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = self.render_into(&mut out);
        out
    }

    fn render_into(&self, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "reconcile run {} · tenant {} · {} · sha256 {}",
            self.run_id, self.tenant, self.file_name, self.sha256_hex
        )?;
        let i = &self.imported;
        if i.pages == 0 {
            writeln!(
                out,
                "import: already complete ({} rows); nothing imported again",
                self.records
            )?;
        } else if i.resumed_from > 0 {
            writeln!(
                out,
                "import: resumed after row {} of {}; {} more page(s) committed",
                i.resumed_from, self.records, i.pages
            )?;
        } else {
            writeln!(out, "import: {} rows in {} page(s)", self.records, i.pages)?;
        }
        writeln!(
            out,
            "{} SKU(s) counted, {} row(s) rejected",
            self.counted_skus,
            self.rejects.len()
        )?;

        if !self.rejects.is_empty() {
            writeln!(
                out,
                "\nrejected rows ({}) — not counted; fix them and import the corrected file \
                 (new contents are a new run):",
                self.rejects.len()
            )?;
            for r in &self.rejects {
                writeln!(out, "  line {}: {}", r.line_no, r.reason)?;
                writeln!(out, "      {}", r.raw)?;
            }
        }

        writeln!(
            out,
            "\ndiscrepancies: {} of {} counted SKU(s) differ from our on_hand",
            self.discrepancies.len(),
            self.counted_skus
        )?;
        if !self.discrepancies.is_empty() {
            writeln!(
                out,
                "  {:<36} {:>6} {:>9} {:>9} {:>7}  style / color / size",
                "sku_id", "line", "counted", "on_hand", "diff"
            )?;
            for c in &self.discrepancies {
                let on_hand = c.on_hand.map_or("-".to_owned(), |n| n.to_string());
                let diff = c
                    .on_hand
                    .map_or("-".to_owned(), |n| format!("{:+}", c.counted - n));
                writeln!(
                    out,
                    "  {:<36} {:>6} {:>9} {:>9} {:>7}  {}",
                    c.sku_id,
                    c.line_no,
                    c.counted,
                    on_hand,
                    diff,
                    c.name()
                )?;
            }
        }

        match &self.applied {
            None if self.booked.is_empty() && self.refused.is_empty() => {
                if !self.discrepancies.is_empty() {
                    writeln!(
                        out,
                        "\nnothing booked: run again with --apply to set on_hand to the counts \
                         through the inventory ledger"
                    )?;
                }
            }
            None => writeln!(
                out,
                "\n(an earlier --apply of this run is shown below; this invocation booked nothing)"
            )?,
            Some(a) => writeln!(
                out,
                "\napply: {} booked, {} already matching, {} refused in this pass",
                a.booked, a.unchanged, a.refused
            )?,
        }
        if !self.booked.is_empty() {
            writeln!(
                out,
                "\nbooked ({}) through the inventory ledger, source reconcile:{}:",
                self.booked.len(),
                self.run_id
            )?;
            for c in &self.booked {
                let (before, after) = (c.on_hand_before.unwrap_or(0), c.on_hand_after.unwrap_or(0));
                writeln!(
                    out,
                    "  {}  line {}: on_hand {before} → {after} ({:+})  {}",
                    c.sku_id,
                    c.line_no,
                    after - before,
                    c.name()
                )?;
            }
        }
        if !self.refused.is_empty() {
            writeln!(
                out,
                "\nREFUSED ({}): on_hand NOT changed, because allocated must stay ≤ on_hand + on_order:",
                self.refused.len()
            )?;
            for c in &self.refused {
                writeln!(
                    out,
                    "  {}  line {}: counted {}: {}  {}",
                    c.sku_id,
                    c.line_no,
                    c.counted,
                    c.detail.as_deref().unwrap_or("refused"),
                    c.name()
                )?;
            }
        }
        if self.fully_applied {
            writeln!(
                out,
                "\nthis run is fully applied; running it again changes nothing"
            )?;
        }
        Ok(())
    }
}
