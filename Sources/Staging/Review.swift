@preconcurrency import Glibc
import Coordination
import CSyscalls
import SystemKit
import SystemPackage

/// What became of one staged change when it was accepted or rejected.
public struct ReviewOutcome: Sendable, Equatable {
    public enum Result: Sendable, Equatable {
        /// The folder now holds the change, durably.
        case applied
        /// The host's item changed since it was staged and stays as it is;
        /// the staged bytes are kept beside it as a conflict version
        /// (`versions list`), named `version`.
        case conflict(version: String)
        /// The host's item changed since it was staged (or something else is
        /// in the way) and stays as it is; the change had no bytes to keep
        /// (a deletion, a mode, a folder). Nothing was applied.
        case keptHost(reason: String)
        /// Not applied, and still staged (`review` lists it again).
        case leftStaged(reason: String)
        /// Never applied, by rule (a FIFO, socket or device; a link leading
        /// out of the folder), and dropped from the staged changes.
        case refused(reason: String)
        /// Thrown away: the clone holds the folder's version again.
        case rejected
    }

    public let change: StagedChange
    public let result: Result
}

extension StagingArea {
    /// The changes `selection` names (all when nil): a path selects the
    /// change at it, a rename from it, and everything below it.
    public static func select(_ changes: [StagedChange], _ selection: [[UInt8]]?) throws(StagingError) -> [StagedChange] {
        guard let selection else { return changes }
        var chosen: [StagedChange] = []
        for path in selection {
            let trimmed = Array(path.reversed().drop { $0 == UInt8(ascii: "/") }.reversed())
            func under(_ item: [UInt8]) -> Bool {
                trimmed.isEmpty || item == trimmed || (item.count > trimmed.count && item.starts(with: trimmed + [UInt8(ascii: "/")]))
            }
            let matching = changes.filter { under($0.path) || $0.from.map(under) == true }
            guard !matching.isEmpty else { throw .noSuchChange(path: path) }
            for change in matching where !chosen.contains(change) { chosen.append(change) }
        }
        return chosen
    }

    /// Applies the staged changes `selection` names (all when nil) to the
    /// granted folder `host` (the folder the grant resolves to now, open),
    /// each as a coordinated writer: the item's write lock, a placeholder
    /// downloaded first, the new contents written beside it and renamed over
    /// it durably. An item that changed since it was staged is never
    /// overwritten (see `ReviewOutcome.Result`). Links, FIFOs and devices
    /// are never followed; set-id bits never applied. When nothing is left
    /// staged, the area's clone goes.
    public func accept(
        _ selection: [[UInt8]]? = nil, host: OwnedDescriptor, hostPath: FilePath, coordinator: FileCoordinator = FileCoordinator(),
        savingComputer: String
    ) throws(StagingError) -> [ReviewOutcome] {
        let (tree, manifest) = try openClone()
        let all = try ChangeList.compute(tree: tree, manifest: manifest, host: host)
        let chosen = try Self.select(all.changes, selection)
        var applier = Applier(
            tree: tree, host: host, hostPath: hostPath, manifest: manifest, found: all.found, coordinator: coordinator,
            savingComputer: savingComputer)
        let outcomes = try applier.apply(chosen)
        try settle(applier.manifest, tree: tree, host: host)
        return outcomes
    }

    /// Throws away the staged changes `selection` names (all when nil): the
    /// clone's items go back to the folder's (`host`, when it can be opened)
    /// version. Nothing of the folder is changed.
    public func reject(_ selection: [[UInt8]]? = nil, host: OwnedDescriptor?) throws(StagingError) -> [ReviewOutcome] {
        guard let selection else {
            let changes = hasClone ? (try? changes(host: host))?.changes ?? [] : []
            try discard()
            return changes.map { ReviewOutcome(change: $0, result: .rejected) }
        }
        let (tree, manifest) = try openClone()
        let all = try ChangeList.compute(tree: tree, manifest: manifest, host: host)
        let chosen = try Self.select(all.changes, selection)
        var entries = ManifestEntries(manifest)
        var outcomes: [ReviewOutcome] = []
        for change in chosen.sorted(by: { $0.path.count > $1.path.count }) {
            // The clone's item goes; the folder's item comes back at each place the change touched.
            for place in [change.path] + (change.from.map { [$0] } ?? []) {
                try Resync.restore(place, tree: tree, host: host, entries: &entries)
            }
            outcomes.append(ReviewOutcome(change: change, result: .rejected))
        }
        try settle(entries.manifest, tree: tree, host: host)
        return outcomes.reversed()
    }

    /// Writes the updated manifest, or discards the clone when it holds no change any more.
    private func settle(_ manifest: Manifest, tree: OwnedDescriptor, host: OwnedDescriptor?) throws(StagingError) {
        if try ChangeList.compute(tree: tree, manifest: manifest, host: host).changes.isEmpty {
            try discard()
        } else {
            // Items copied back into the clone (a reject, a conflict) are on
            // disk before a manifest names them: after a crash, a manifest
            // naming a lost copy would list the folder's file as deleted.
            try flush()
            try writeManifest(manifest)
        }
    }
}

/// Makes the clone's item at a path the folder's again, and its manifest entries with it.
enum Resync {
    static func restore(_ path: [UInt8], tree: OwnedDescriptor, host: OwnedDescriptor?, entries: inout ManifestEntries) throws(StagingError) {
        guard !path.isEmpty else { return }
        let (parentPath, name) = split(path)
        entries.removeTree(path)
        guard let cloneParent = HostItem.locate(parentPath, in: tree).flatMap({ try? $0.reopenedFolder() }) else { return }
        try TreeRemoval.remove(name, in: cloneParent, shown: path)
        guard let host, let hostParent = HostItem.locate(parentPath, in: host).flatMap({ try? $0.reopenedFolder() }) else { return }
        for entry in try Clone.copyItem(name, from: hostParent, into: cloneParent, path: path) { entries.set(entry) }
    }

    /// The folder part (empty for the top) and the last name.
    static func split(_ path: [UInt8]) -> (parent: [UInt8], name: [UInt8]) {
        guard let slash = path.lastIndex(of: UInt8(ascii: "/")) else { return ([], path) }
        return (Array(path[..<slash]), Array(path[(slash + 1)...]))
    }
}
