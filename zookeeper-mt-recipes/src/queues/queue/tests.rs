use super::*;

#[test]
fn items_sort_by_sequence_not_name() {
    let children = vec![
        "item-ffff-0000000003".to_string(),
        "receipts".to_string(),
        "item-0000-0000000010".to_string(),
        "item-aaaa-0000000001".to_string(),
        "item0000000002".to_string(),
        "other-0000000000".to_string(),
    ];
    let (items, past_end) = split_items(children);
    assert_eq!(
        items,
        [
            "item-aaaa-0000000001",
            "item0000000002",
            "item-ffff-0000000003",
            "item-0000-0000000010"
        ]
    );
    assert!(past_end.is_empty());
}

#[test]
fn items_past_the_counters_end_take_no_part() {
    let children = vec![
        "item-b-2147483647".to_string(),
        "item-c--2147483648".to_string(),
        "item-a-0000000005".to_string(),
        "item-d--000000003".to_string(),
    ];
    let (items, mut past_end) = split_items(children);
    assert_eq!(items, ["item-a-0000000005"]);
    past_end.sort();
    assert_eq!(
        past_end,
        [
            "item-b-2147483647",
            "item-c--2147483648",
            "item-d--000000003"
        ]
    );
}

#[test]
fn ordering_tags_from_item_names() {
    let id = "0123456789abcdef0123456789abcdef";
    let p = format!("item-{id}-p0000000007-0000000003");
    assert_eq!(tag_of(&p), Some("p0000000007"));
    assert_eq!(order_key(Order::Priority, &p), 7);
    assert_eq!(order_key(Order::Delayed, &p), 0, "not a due time");
    let d = format!("item-{id}-d00000001700000000000--2147483648");
    assert_eq!(tag_of(&d), Some("d00000001700000000000"));
    assert_eq!(order_key(Order::Delayed, &d), 1_700_000_000_000);
    // Untagged and legacy names: no tag, key 0 (first).
    assert_eq!(tag_of(&format!("item-{id}-0000000001")), None);
    assert_eq!(tag_of("item0000000002"), None);
    assert_eq!(order_key(Order::Priority, "item0000000002"), 0);
    // Priority order is stable: FIFO among equal priorities.
    let names = vec![
        format!("item-{id}-p0000000002-0000000001"),
        format!("item-{id}-p0000000001-0000000002"),
        format!("item-{id}-p0000000002-0000000003"),
    ];
    let (mut items, _) = split_items(names.clone());
    items.sort_by_key(|n| order_key(Order::Priority, n));
    assert_eq!(
        items,
        [names[1].clone(), names[0].clone(), names[2].clone()]
    );
}

#[test]
fn put_guid_from_an_item_name() {
    let id = "0123456789abcdef0123456789abcdef";
    assert_eq!(guid_of(&format!("item-{id}-0000000001")), Some(id));
    assert_eq!(guid_of(&format!("item-{id}--2147483648")), Some(id));
    assert_eq!(guid_of("item0000000002"), None);
    assert_eq!(guid_of("item-short-0000000002"), None);
    assert_eq!(guid_of(&format!("item-{id}x0000000001")), None);
}

/// An item created past the counter's end is removed with its receipt; the queue
/// node (with its receipts node) restarts only once empty, and then hands out small
/// numbers again. On a real server, with the end simulated by a crafted name.
#[test]
fn a_put_past_the_counters_end_restarts_an_empty_queue_only() {
    let zk = ZooKeeper::connect(
        &zk_harness::shared_test_connect_string(),
        Duration::from_secs(10),
    )
    .unwrap();
    let path = format!("/recipes-unit/queue-end-{}", guid());
    let store = ItemStore {
        items: path.clone(),
        receipts: format!("{path}/{RECEIPTS}"),
        receipts_inside: true,
        nodes: NodeOptions::default(),
    };
    let patience = Patience::reconnect(Duration::from_secs(10));
    let queue = Queue::new(&zk, &path).unwrap();
    queue.put(b"waiting").unwrap();
    queue.put(b"also waiting").unwrap();
    let wrapped = |id: &str| {
        let name = format!("{ITEM_PREFIX}-{id}-2147483647");
        let open = zookeeper_mt::Acl::OPEN_UNSAFE;
        zk.create(
            &format!("{path}/{name}"),
            b"late",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open),
        )
        .unwrap();
        zk.create(
            &store.receipt(id),
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Ephemeral).with_acl(open),
        )
        .unwrap();
        name
    };
    let id = guid();
    let name = wrapped(&id);
    assert_eq!(
        crate::runtime::block_on(store.settle_async(&zk, &id, &name, patience)).unwrap(),
        Some(Restart::NotEmpty)
    );
    assert!(zk.exists(&format!("{path}/{name}")).unwrap().is_none());
    assert!(zk.exists(&store.receipt(&id)).unwrap().is_none());
    assert_eq!(queue.len().unwrap(), 2, "the waiting items are kept");

    assert!(queue.try_take().unwrap().is_some());
    assert!(queue.try_take().unwrap().is_some());
    let id = guid();
    let name = wrapped(&id);
    assert_eq!(
        crate::runtime::block_on(store.settle_async(&zk, &id, &name, patience)).unwrap(),
        Some(Restart::Restarted)
    );
    assert_eq!(zk.get_children(&path).unwrap(), [RECEIPTS]);
    queue.put(b"fresh").unwrap();
    let (items, _) = split_items(zk.get_children(&path).unwrap());
    // The restarted counter: `receipts` took 0, the item 1.
    assert_eq!(crate::nodes::sequence_of(&items[0]), Some(1));
    assert_eq!(queue.try_take().unwrap().as_deref(), Some(&b"fresh"[..]));
    let id = guid();
    let in_range = format!("{ITEM_PREFIX}-{id}-0000000005");
    assert_eq!(
        crate::runtime::block_on(store.settle_async(&zk, &id, &in_range, patience)).unwrap(),
        None,
        "an in-range item is accepted"
    );
    drop(queue);
    zk.close().unwrap();
}
