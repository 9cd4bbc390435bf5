@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import CSyscalls
import SystemPackage

/// `sandboxed-run review`: what a staged run changed, and the person's answer.
struct Review: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "review",
        abstract: "List, diff, accept or reject the changes a command made in a staged grant (run --review).",
        discussion: """
            A grant launched with --review (or a policy with org.sandboxed-run.files.review) gets a clone of its folder, \
            kept in the broker's state; the folder itself is untouched until you accept. PATHs are host paths in a staged \
            grant's folder (a folder selects everything below it; none: every change). Accepting writes each file as a \
            coordinated writer (its lock, a placeholder downloaded first, flushed before exit 0); a file that changed \
            outside since it was staged is never overwritten: the folder keeps its version and the staged bytes become a \
            conflict version (`sandboxed-run versions list FILE`). FIFOs, sockets and devices are never made, links that \
            lead out of the folder never, set-id bits never. A grant that is not fresh now (revoked, moved, replaced, \
            covered) applies nothing. See docs/staging.md. Exit codes: 0 done; 3 accept: some changes were not applied \
            as staged (each is named, with why); 125 anything else.
            """,
        subcommands: [List.self, Diff.self, Accept.self, Reject.self]
    )

    /// The reviews of `app`, and the change-relative paths the operands name.
    static func open(_ app: AppID, operands: [[UInt8]]) throws -> [(review: StagedReview, paths: [[UInt8]]?)] {
        let reviews = try SandboxSession.cli().stagedReviews(app: app)
        guard !reviews.isEmpty else { throw StagingError.nothingStaged(app: app.rawValue) }
        guard !operands.isEmpty else { return reviews.map { ($0, nil) } }
        var chosen: [(StagedReview, [[UInt8]]?)] = reviews.map { ($0, []) }
        let here = Picking.currentDirectoryBytes()
        guard !here.isEmpty || operands.allSatisfy({ $0.first == UInt8(ascii: "/") }) else {
            throw ValidationError("a relative path, and the working directory cannot be found: give absolute paths")
        }
        for operand in operands {
            let absolute = operand.first == UInt8(ascii: "/") ? operand : here + [UInt8(ascii: "/")] + operand
            let path = normalized(absolute)
            guard let index = reviews.firstIndex(where: { review in
                let folder = normalized(review.path.bytes)
                return path == folder || path.starts(with: folder + [UInt8(ascii: "/")])
            }) else {
                throw ValidationError("\(Printable.path(bytes: operand)) is in no staged grant of \(app.rawValue): `sandboxed-run review list --app \(app.rawValue)` names them")
            }
            let folder = normalized(reviews[index].path.bytes)
            chosen[index].1?.append(Array(path.dropFirst(min(path.count, folder.count + 1))))
        }
        return chosen.filter { $0.1?.isEmpty == false }
    }

    /// "/a//b/./c/" as "/a/b/c" (no ".." is resolved: one is refused).
    static func normalized(_ path: [UInt8]) -> [UInt8] {
        let names = path.split(separator: UInt8(ascii: "/")).filter { !$0.elementsEqual([0x2E]) }
        return [UInt8(ascii: "/")] + Array(names.joined(separator: [UInt8(ascii: "/")]))
    }

    static func line(_ change: StagedChange, in folder: FilePath) -> String {
        var text = "\(change.kind.rawValue.padding(12))\(Printable.path(bytes: change.hostPath(in: folder)))"
        if let from = change.from { text += "  (from \(Printable.path(bytes: StagedChange.hostPath(from, in: folder))))" }
        if change.item == .folder { text += "  (folder)" }
        if change.item == .link { text += "  (link)" }
        if change.item == .special { text += "  (FIFO, socket or device: never applied)" }
        if let old = change.oldMode, let new = change.newMode, old != new { text += "  (mode \(String(old, radix: 8)) -> \(String(new, radix: 8)))" }
        if change.changedOutside { text += "  ! changed outside since staged" }
        return text
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "Name every staged change: added, modified, deleted, renamed (with from), mode-changed.")
        @OptionGroup var app: AppOptions
        @Flag(help: "Print a JSON array of objects with path, change, and from (renamed), item, grant, changedOutside.") var json = false

        func run() throws {
            let reviews = try SandboxSession.cli().stagedReviews(app: try app.appID())
            var report: [ChangeReport] = []
            var text: [String] = []
            for review in reviews {
                let changes = try review.changes()
                text.append("grant \(Printable.message(review.staged.name)) (\(review.staged.grant)) \(Printable.path(bytes: review.path.bytes)): "
                    + (changes.isEmpty ? "no changes" : "\(changes.count) change\(changes.count == 1 ? "" : "s")"))
                if review.resolution.status != .fresh {
                    text.append("  the grant is \(review.resolution.status.rawValue) now (\(Printable.message(review.resolution.message))): accepting applies nothing")
                }
                for change in changes {
                    text.append("  " + Review.line(change, in: review.path))
                    report.append(ChangeReport(change, review: review))
                }
            }
            if json {
                print(JSON.encode(report))
            } else if reviews.isEmpty {
                print("app \(app.app) has no staged changes")
            } else {
                // A listing, on stdout; every name in it escaped once by `Review.line`.
                Console.escapedLines(text, to: 1)
            }
        }
    }

    struct Diff: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "diff",
            abstract: "Print a unified diff of the staged changes (git apply and patch -p1 take it); binary files as one line.")
        @OptionGroup var app: AppOptions
        @Argument(help: "Host paths in a staged grant (default: every change).") var paths: [String] = []

        func run() throws {
            for (review, selection) in try Review.open(try app.appID(), operands: RawArguments.operands(of: "diff")) {
                var diff = try review.diff(selection)
                // On a terminal the file's bytes are shown, never obeyed; piped, they are exact.
                if isatty(1) != 0 { diff = UnifiedDiff.printable(diff) }
                var offset = 0
                while offset < diff.count {
                    let written = diff.withUnsafeBytes { Glibc.write(1, $0.baseAddress! + offset, $0.count - offset) }
                    if written < 0, errno == EINTR { continue }
                    guard written > 0 else { throw ExitCode(125) }
                    offset += written
                }
            }
        }
    }

    struct Accept: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "accept", abstract: "Apply staged changes to the folder, as a coordinated writer; exit 0 once they are on disk.")
        @OptionGroup var app: AppOptions
        @Argument(help: "Host paths in a staged grant (default: every change).") var paths: [String] = []

        func run() throws {
            var allApplied = true
            for (review, selection) in try Review.open(try app.appID(), operands: RawArguments.operands(of: "accept")) {
                for outcome in try review.accept(selection) {
                    let path = Printable.path(bytes: outcome.change.hostPath(in: review.path))
                    switch outcome.result {
                    case .applied: print("applied   \(path)")
                    case .conflict(let version):
                        allApplied = false
                        print("conflict  \(path): changed outside since staged; the folder's version stays, the staged one is conflict version \(version) (`sandboxed-run versions list`)")
                    case .keptHost(let reason):
                        allApplied = false
                        print("kept      \(path): \(Printable.message(reason)); the folder's version stays")
                    case .leftStaged(let reason):
                        allApplied = false
                        print("staged    \(path): \(Printable.message(reason)); still staged")
                    case .refused(let reason):
                        allApplied = false
                        print("refused   \(path): \(Printable.message(reason))")
                    case .rejected: print("rejected  \(path)")
                    }
                }
            }
            if !allApplied { throw ExitCode(3) }
        }
    }

    struct Reject: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reject", abstract: "Throw staged changes away; the folder is not touched.")
        @OptionGroup var app: AppOptions
        @Argument(help: "Host paths in a staged grant (default: every change).") var paths: [String] = []

        func run() throws {
            for (review, selection) in try Review.open(try app.appID(), operands: RawArguments.operands(of: "reject")) {
                for outcome in try review.reject(selection) {
                    print("rejected  \(Printable.path(bytes: outcome.change.hostPath(in: review.path)))")
                }
            }
        }
    }
}

/// `review list --json`: one object per change.
struct ChangeReport: Encodable {
    let path: JSONPath
    let change: String
    let from: JSONPath?
    let item: String
    let grant: String
    let changedOutside: Bool
    let oldMode: String?
    let newMode: String?

    init(_ change: StagedChange, review: StagedReview) {
        path = JSONPath(FilePath(bytes: change.hostPath(in: review.path)))
        self.change = change.kind.rawValue
        from = change.from.map { JSONPath(FilePath(bytes: StagedChange.hostPath($0, in: review.path))) }
        item = change.item.rawValue
        grant = review.staged.grant.hex
        changedOutside = change.changedOutside
        oldMode = change.oldMode.map { String($0, radix: 8) }
        newMode = change.newMode.map { String($0, radix: 8) }
    }
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self + " " : self + String(repeating: " ", count: width - count) }
}
