//! The report document: sections of Markdown text and SVG figures, written out as Markdown (the
//! figures as files beside it) and as one self-contained HTML page (the figures inline).
//!
//! The Markdown used is the small subset the experiments produce: `## `/`### ` headings, pipe
//! tables, fenced code blocks, `- ` lists, paragraphs and `inline code`; the HTML renderer
//! knows exactly that subset.

use std::fmt::Write;

pub struct Figure {
    /// File name (without directory) the SVG is written to beside the Markdown.
    pub file: String,
    pub caption: String,
    pub svg: String,
}

pub struct Section {
    pub title: String,
    pub markdown: String,
    pub figures: Vec<Figure>,
}

pub struct Page {
    pub title: String,
    pub intro: String,
    pub sections: Vec<Section>,
}

impl Page {
    /// Markdown, with figures referenced by file name.
    pub fn markdown(&self) -> String {
        let mut s = format!("# {}\n\n{}\n", self.title, self.intro.trim_end());
        for sec in &self.sections {
            let _ = write!(s, "\n## {}\n\n{}\n", sec.title, sec.markdown.trim_end());
            for f in &sec.figures {
                let _ = write!(s, "\n![{}]({})\n", f.caption, f.file);
            }
        }
        s
    }

    /// One HTML page with every figure inline.
    pub fn html(&self) -> String {
        let mut s =
            String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
        let _ = write!(s, "<title>{}</title>", escape(&self.title));
        s.push_str(
            "<style>body{font-family:sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;\
             line-height:1.4}table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid \
             #ccc;padding:.25rem .6rem;text-align:right}td:first-child,th:first-child{text-align:\
             left}pre{background:#f6f6f6;padding:.6rem;overflow-x:auto}figure{margin:1rem 0}\
             </style></head><body>\n",
        );
        let _ = writeln!(s, "<h1>{}</h1>", escape(&self.title));
        s.push_str(&markdown_to_html(&self.intro));
        for sec in &self.sections {
            let _ = writeln!(s, "<section><h2>{}</h2>", escape(&sec.title));
            s.push_str(&markdown_to_html(&sec.markdown));
            for f in &sec.figures {
                let _ = writeln!(
                    s,
                    "<figure>{}<figcaption>{}</figcaption></figure>",
                    f.svg.trim_end(),
                    escape(&f.caption)
                );
            }
            s.push_str("</section>\n");
        }
        s.push_str("</body></html>\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Escape, then turn `code` spans into <code>.
fn inline(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in escape(s).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

fn cells(line: &str) -> Vec<&str> {
    let t = line.trim().trim_start_matches('|').trim_end_matches('|');
    t.split('|').map(str::trim).collect()
}

fn markdown_to_html(md: &str) -> String {
    let lines: Vec<&str> = md.lines().collect();
    let mut s = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim().is_empty() {
            i += 1;
        } else if line.starts_with("```") {
            s.push_str("<pre>");
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                let _ = writeln!(s, "{}", escape(lines[i]));
                i += 1;
            }
            s.push_str("</pre>\n");
            i += 1;
        } else if let Some(h) = line.strip_prefix("### ") {
            let _ = writeln!(s, "<h3>{}</h3>", inline(h));
            i += 1;
        } else if line.starts_with('|') {
            s.push_str("<table>\n");
            let header = cells(line);
            s.push_str("<tr>");
            for c in header {
                let _ = write!(s, "<th>{}</th>", inline(c));
            }
            s.push_str("</tr>\n");
            i += 1;
            if i < lines.len() && lines[i].trim_start().starts_with("|-") {
                i += 1;
            }
            while i < lines.len() && lines[i].starts_with('|') {
                s.push_str("<tr>");
                for c in cells(lines[i]) {
                    let _ = write!(s, "<td>{}</td>", inline(c));
                }
                s.push_str("</tr>\n");
                i += 1;
            }
            s.push_str("</table>\n");
        } else if line.starts_with("- ") {
            s.push_str("<ul>\n");
            while i < lines.len() && lines[i].starts_with("- ") {
                let _ = writeln!(s, "<li>{}</li>", inline(&lines[i][2..]));
                i += 1;
            }
            s.push_str("</ul>\n");
        } else {
            let mut para = Vec::new();
            while i < lines.len()
                && !lines[i].trim().is_empty()
                && !lines[i].starts_with(['|', '#'])
                && !lines[i].starts_with("```")
                && !lines[i].starts_with("- ")
            {
                para.push(lines[i]);
                i += 1;
            }
            if para.is_empty() {
                // A heading level this subset does not know: show it as text.
                para.push(lines[i]);
                i += 1;
            }
            let _ = writeln!(s, "<p>{}</p>", inline(&para.join(" ")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_renders_every_construct_and_inlines_figures() {
        let page = Page {
            title: "R & D".into(),
            intro: "Made by `strata report`.".into(),
            sections: vec![Section {
                title: "Table".into(),
                markdown: "Intro <b>.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```\nx < y\n```\n\n- one\n- two\n\n### Sub\ntext".into(),
                figures: vec![Figure {
                    file: "f.svg".into(),
                    caption: "the figure".into(),
                    svg: "<svg></svg>\n".into(),
                }],
            }],
        };
        let html = page.html();
        for want in [
            "<title>R &amp; D</title>",
            "<code>strata report</code>",
            "<p>Intro &lt;b&gt;.</p>",
            "<tr><th>a</th><th>b</th></tr>",
            "<tr><td>1</td><td>2</td></tr>",
            "<pre>x &lt; y\n</pre>",
            "<li>two</li>",
            "<h3>Sub</h3>",
            "<p>text</p>",
            "<figure><svg></svg><figcaption>the figure</figcaption></figure>",
        ] {
            assert!(html.contains(want), "missing {want} in {html}");
        }
        let md = page.markdown();
        assert!(md.starts_with("# R & D\n"));
        assert!(md.contains("## Table\n") && md.contains("![the figure](f.svg)"));
    }
}
